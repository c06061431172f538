"""lightning_rl: RL post-training for language models on PyTorch Lightning."""

__version__ = "0.1.0"
