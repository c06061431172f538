"""A tiny Qwen3-architecture causal LM and a character-level tokenizer, built locally (no hub).

Both are saved in Hugging Face format so ``transformers.AutoModelForCausalLM`` / ``AutoTokenizer`` and ``vllm.LLM`` load
the same directory. head_dim is 64 because vLLM's CPU attention refuses smaller heads.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch

PAD, UNK, EOS = "<pad>", "<unk>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, UNK, EOS, *ROLE_TOKENS)
VOCAB_SIZE = 128

# One turn renders as <|role|>content<|end|>; generation starts after <|assistant|>. List content renders its text
# parts.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _char_vocab() -> dict[str, int]:
    chars = [c for c in string.printable if c.isprintable() or c == "\n"]
    tokens = list(SPECIAL_TOKENS) + [c for c in chars if c not in SPECIAL_TOKENS]
    if len(tokens) > VOCAB_SIZE:
        raise AssertionError(f"character vocabulary has {len(tokens)} entries, more than {VOCAB_SIZE}")
    return {tok: i for i, tok in enumerate(tokens)}


def build_char_tokenizer():
    """A character-level ``PreTrainedTokenizerFast``: printable ASCII plus role/eos/pad specials and a chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = _char_vocab()
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # "." would skip newlines
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=EOS,
        additional_special_tokens=list(ROLE_TOKENS),
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(
    *,
    vocab_size: int = VOCAB_SIZE,
    hidden_size: int = 256,
    intermediate_size: int = 512,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 128,
    seed: int = 0,
    pad_token_id: int = 0,
    eos_token_id: int = 2,
):
    """A randomly initialised ``Qwen3ForCausalLM`` (float32, tied embeddings, head_dim 64)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(  # type: ignore[call-arg]  # config kwargs are not in the stub's signature
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=64,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = pad_token_id
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.bos_token_id = None
    return model


def save_tiny_model(path: str | Path, *, seed: int = 0, **model_kwargs) -> Path:
    """Build the tokenizer and a fresh tiny model and save both as an HF directory; returns the directory."""
    path = Path(path)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(
        seed=seed, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **model_kwargs
    )
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path
