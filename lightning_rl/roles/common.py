"""What every model role shares: loading an HF causal LM, FSDP2 sharding, optimizer settings, response forwards."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
from torch import nn

from lightning_rl.errors import ConfigError
from lightning_rl.types import Trajectory

TINY = "tiny"
"""``model_path: tiny`` builds a fresh tiny Qwen3 model in memory (the SFT starting point); else an HF directory."""


@dataclass
class OptimizerConfig:
    """AdamW settings of one trainable role."""

    lr: float = 1e-5
    """Learning rate."""
    weight_decay: float = 0.0
    """Decoupled weight decay."""
    beta1: float = 0.9
    """Adam beta1."""
    beta2: float = 0.999
    """Adam beta2."""
    eps: float = 1e-8
    """Adam's denominator floor."""
    grad_clip_norm: float = 1.0
    """Clip the global gradient norm before each step; 0 disables clipping."""
    warmup_steps: int = 0
    """Linear learning-rate warmup over this many optimizer steps of the role."""
    schedule: Literal["constant", "linear"] = "constant"
    """After warmup: constant, or linear decay to min_lr_ratio x lr at the run's last optimizer step."""
    min_lr_ratio: float = 0.1
    """Final learning rate of the linear schedule, as a fraction of lr."""

    def __post_init__(self) -> None:
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"optimizer.lr must be a positive finite number, got {self.lr}")
        if self.grad_clip_norm < 0:
            raise ConfigError(f"optimizer.grad_clip_norm must be >= 0 (0 disables clipping), got {self.grad_clip_norm}")
        if self.warmup_steps < 0:
            raise ConfigError(f"optimizer.warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"optimizer.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ConfigError(f"optimizer.beta1/beta2 must be in [0, 1), got {self.beta1}/{self.beta2}")

    def build(self, params, total_steps: int = 0) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        """AdamW and its schedule; ``total_steps`` is the role's optimizer steps over the whole run."""
        optimizer = torch.optim.AdamW(
            params, lr=self.lr, betas=(self.beta1, self.beta2), eps=self.eps, weight_decay=self.weight_decay
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(_lr_factor, self, max(total_steps, 1)))
        return optimizer, scheduler


def _lr_factor(config: OptimizerConfig, total_steps: int, step: int) -> float:
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    decay_steps = max(1, total_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / decay_steps)
    return 1.0 - (1.0 - config.min_lr_ratio) * progress


def load_causal_lm(model_path: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Module:
    """An HF causal LM from a local directory, or a fresh tiny model for ``model_path == "tiny"``."""
    if model_path == TINY:
        from lightning_rl.models.tiny import build_char_tokenizer, build_tiny_model

        tok = build_char_tokenizer()
        return build_tiny_model(seed=seed, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id).to(dtype)
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)


def load_tokenizer(model_path: str):
    if model_path == TINY:
        from lightning_rl.models.tiny import build_char_tokenizer

        return build_char_tokenizer()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def check_model_path(model_path: str, key: str) -> None:
    """Preflight: the path is the tiny sentinel or a directory with an HF config."""
    from pathlib import Path

    if model_path == TINY:
        return
    p = Path(model_path)
    if not (p / "config.json").is_file():
        raise ConfigError(
            f"{key}: {model_path!r} is not an HF model directory (no config.json there); "
            f"give a local directory saved with save_pretrained, or 'tiny' for a fresh tiny model"
        )


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of an HF decoder (``model.model.layers`` for Qwen/Llama families)."""
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise ConfigError(f"cannot find the decoder layers of {type(model).__name__} to shard (expected .model.layers)")
    return list(layers)


def shard_module(model: nn.Module, mesh, *, reshard_after_forward: bool = True) -> nn.Module:
    """FSDP2: one ``fully_shard`` per decoder layer, then the root (so embeddings/head shard with the root group)."""
    if mesh is None:
        return model
    from torch.distributed.fsdp import fully_shard

    dp_mesh = mesh["data_parallel"] if "data_parallel" in (mesh.mesh_dim_names or ()) else mesh
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=dp_mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard_after_forward)
    return model


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: 0 at the first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def response_logits(model: nn.Module, traj: Trajectory) -> torch.Tensor:
    """Run a causal LM on prompt+response and return the logits [B, T, V] that predict each response token.

    Position P-1+t predicts response token t, so the slice is [P-1, P+T-1); only the last T+1 positions are projected.
    """
    attn = traj.attention_mask.long()
    t = traj.response_ids.shape[1]
    out = model(
        input_ids=traj.input_ids,
        attention_mask=attn,
        position_ids=position_ids(attn),
        use_cache=False,
        logits_to_keep=t + 1,
    )
    return out.logits[:, :-1]
