"""Export a policy as an HF-format directory that transformers and vLLM both load."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch


def export_hf(policy, state_dict: dict[str, torch.Tensor], tokenizer, out_dir: Path) -> Path:
    """Write config + safetensors + tokenizer into a temporary sibling, then rename into place (never half-written).

    ``state_dict`` is the full (gathered) state dict; the directory is rebuilt from a fresh instance of the model class,
    so sharded (FSDP2) parameters never reach ``save_pretrained``.
    """
    from transformers import AutoModelForCausalLM

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    config = policy.model.config
    with torch.device("meta"):
        shell = AutoModelForCausalLM.from_config(config)
    shell.load_state_dict(state_dict, assign=True, strict=False)
    shell.tie_weights()
    missing = [name for name, p in shell.named_parameters() if p.is_meta]
    if missing:
        raise ValueError(f"cannot export to {out_dir}: the state dict lacks {', '.join(missing[:5])}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        shell.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
