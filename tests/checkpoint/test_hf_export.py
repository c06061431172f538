"""export_hf: the exported directory is the policy's current weights in HF format, and it is written atomically."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightning_rl.checkpoint.hf_export import export_hf
from lightning_rl.roles import PolicyModule
from lightning_rl.roles.common import load_tokenizer

pytestmark = pytest.mark.integration

IDS = torch.tensor([[4, 20, 21, 22, 5, 6, 7, 8], [4, 30, 31, 32, 33, 34, 5, 9]])


@pytest.fixture
def policy(tiny_model_dir) -> PolicyModule:
    module = PolicyModule(str(tiny_model_dir))
    module.build()
    return module


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(str(tiny_model_dir))


def perturb(policy: PolicyModule, seed: int) -> None:
    """Move every weight, so an export of the starting files (instead of the live weights) cannot pass."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=gen))


@torch.no_grad()
def logits_of(model) -> torch.Tensor:
    return model.eval()(input_ids=IDS).logits


def load_exported(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path)


def leftovers(parent: Path, name: str) -> list[str]:
    """Temporary or backup siblings export_hf may have left next to ``name``."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}"))


def test_export_loads_in_transformers_with_identical_logits(policy, tokenizer, tmp_path) -> None:
    perturb(policy, seed=0)
    out = export_hf(policy, policy.hf_state_dict(), tokenizer, tmp_path / "export" / "step_1")
    assert out == tmp_path / "export" / "step_1" and out.is_dir()
    model, tok = load_exported(out)
    assert torch.equal(logits_of(model), logits_of(policy.model))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # still tied
    text = "<|user|>12+7=<|end|><|assistant|>19"
    assert tok(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert tok.eos_token_id == tokenizer.eos_token_id and tok.pad_token_id == tokenizer.pad_token_id
    assert leftovers(out.parent, out.name) == []


def test_export_replaces_an_existing_directory(policy, tokenizer, tmp_path) -> None:
    out = tmp_path / "latest"
    export_hf(policy, policy.hf_state_dict(), tokenizer, out)
    (out / "stale.txt").write_text("from the previous export")
    perturb(policy, seed=1)
    export_hf(policy, policy.hf_state_dict(), tokenizer, out)
    model, _ = load_exported(out)
    assert torch.equal(logits_of(model), logits_of(policy.model))
    assert not (out / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]


def disk_full(*args, **kwargs):
    raise OSError("disk full")


def test_failed_export_leaves_no_output_and_no_temp_dir(policy, tokenizer, tmp_path, monkeypatch) -> None:
    # The tokenizer is written after the weights: the failure comes with a half-written temporary directory.
    monkeypatch.setattr(tokenizer, "save_pretrained", disk_full)
    parent = tmp_path / "exports"
    with pytest.raises(OSError, match="disk full"):
        export_hf(policy, policy.hf_state_dict(), tokenizer, parent / "step_2")
    assert parent.is_dir() and list(parent.iterdir()) == []


def test_failed_export_keeps_the_previous_directory(policy, tokenizer, tmp_path, monkeypatch) -> None:
    out = tmp_path / "latest"
    export_hf(policy, policy.hf_state_dict(), tokenizer, out)
    before = logits_of(load_exported(out)[0])
    perturb(policy, seed=2)
    monkeypatch.setattr(tokenizer, "save_pretrained", disk_full)
    with pytest.raises(OSError, match="disk full"):
        export_hf(policy, policy.hf_state_dict(), tokenizer, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
    assert torch.equal(logits_of(load_exported(out)[0]), before)
