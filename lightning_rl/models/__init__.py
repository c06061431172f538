"""Model builders: HF directories, and the tiny model the tests and the demo use."""

from lightning_rl.models.tiny import build_char_tokenizer, build_tiny_model, save_tiny_model

__all__ = ["build_char_tokenizer", "build_tiny_model", "save_tiny_model"]
