"""The tiny Qwen3 model and char tokenizer: size, HF round trip, tokenizer exactness, chat template, seeding."""

from __future__ import annotations

import pytest
import torch

from lightning_rl.models.tiny import EOS, PAD, VOCAB_SIZE, build_char_tokenizer, build_tiny_model, save_tiny_model

PRINTABLE_ASCII = "".join(chr(c) for c in range(32, 127)) + "\n"

# Qwen3, hidden 256, intermediate 512, 2 layers, 4 query / 2 kv heads of head_dim 64, vocab 128, tied embeddings:
#   embedding                  128 * 256                                   =    32,768
#   per layer: q, o proj       2 * 256 * (4 * 64)                          =   131,072
#              k, v proj       2 * 256 * (2 * 64)                          =    65,536
#              gate, up, down  3 * 256 * 512                               =   393,216
#              q/k norm        2 * 64;  input/post-attention norm 2 * 256   =       640
#                                                                   layer  =   590,464
#   2 layers + embedding + final norm (256)                                = 1,213,952
TINY_PARAMS = 32_768 + 2 * 590_464 + 256


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.mark.integration
def test_tiny_model_size_and_head_dim() -> None:
    model = build_tiny_model()
    assert sum(p.numel() for p in model.parameters()) == TINY_PARAMS
    assert model.config.head_dim == 64
    assert model.config.hidden_size // model.config.num_attention_heads == 64
    assert model.config.vocab_size == VOCAB_SIZE
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.integration
def test_saved_dir_loads_in_transformers(tmp_path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = save_tiny_model(tmp_path / "tiny", seed=3)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    # The loaded weights are the built ones: identical logits to a fresh build with the same seed.
    ref = build_tiny_model(seed=3, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id).eval()
    ids = torch.tensor([tok("<|user|>12+7=<|end|><|assistant|>19")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, ref(input_ids=ids).logits)
    assert model.config.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids(EOS)
    assert model.config.pad_token_id == tok.pad_token_id == tok.convert_tokens_to_ids(PAD)
    assert model.generation_config.eos_token_id == tok.eos_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id
    turn = [{"role": "user", "content": "1+1="}]
    rendered = tok.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
    assert rendered == "<|user|>1+1=<|end|><|assistant|>"


@pytest.mark.unit
def test_tokenizer_round_trips_printable_ascii_one_token_per_char(tokenizer) -> None:
    ids = tokenizer(PRINTABLE_ASCII, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(PRINTABLE_ASCII)
    assert len(set(ids)) == len(PRINTABLE_ASCII)  # no two characters share an id
    assert tokenizer.unk_token_id not in ids
    assert max(ids) < VOCAB_SIZE
    assert tokenizer.decode(ids) == PRINTABLE_ASCII
    # Space runs and leading/trailing spaces survive too (no clean-up, no merging).
    text = "  a  b\n c = 12 + 7 "
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


@pytest.mark.unit
def test_tokenizer_round_trips_newline_runs(tokenizer) -> None:
    text = "Question:\n\nAnswer:\n\n\n42"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tokenizer.decode(ids) == text


@pytest.mark.unit
def test_tokenizer_special_ids(tokenizer) -> None:
    assert tokenizer.pad_token == PAD and tokenizer.pad_token_id == 0
    assert tokenizer.eos_token == EOS and tokenizer.eos_token_id == 2
    assert tokenizer.padding_side == "left"
    # A special token in the text is one id, and decode(skip_special_tokens=True) drops it.
    ids = tokenizer("<|assistant|>19<|end|>", add_special_tokens=False)["input_ids"]
    assert ids == [tokenizer.convert_tokens_to_ids("<|assistant|>"), *tokenizer.convert_tokens_to_ids(["1", "9"]), 2]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "19"


@pytest.mark.unit
def test_chat_template_one_user_turn(tokenizer) -> None:
    messages = [{"role": "user", "content": "12+7="}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == "<|user|>12+7=<|end|><|assistant|>"
    without = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert without == "<|user|>12+7=<|end|>"


@pytest.mark.unit
def test_chat_template_list_content_renders_text_parts(tokenizer) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "12+"},
                {"type": "image"},
                {"type": "text", "text": "7="},
            ],
        },
    ]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == "<|system|>be brief<|end|><|user|>12+7=<|end|><|assistant|>"


@pytest.mark.integration
def test_build_is_seeded_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    a = build_tiny_model(seed=0).state_dict()
    assert torch.equal(torch.get_rng_state(), before)
    b = build_tiny_model(seed=0).state_dict()
    c = build_tiny_model(seed=1).state_dict()
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # Every randomly initialised matrix differs with another seed (norm weights are ones under any seed).
    matrices = [k for k in a if a[k].dim() == 2]
    assert matrices and all(not torch.equal(a[k], c[k]) for k in matrices)
