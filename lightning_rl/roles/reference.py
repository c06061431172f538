"""The reference role: a frozen copy of the starting policy that only scores."""

from __future__ import annotations

import torch
from lightning.pytorch import LightningModule

from lightning_rl.algorithms import token_logprobs
from lightning_rl.roles.common import load_causal_lm, response_logits, shard_module
from lightning_rl.roles.policy import micro_batches
from lightning_rl.types import Trajectory


class ReferenceModule(LightningModule):
    """Frozen (eval mode, ``requires_grad=False``, no optimizer); rebuilt from ``model_path`` on every start and never
    saved in checkpoints."""

    def __init__(self, model_path: str, logprob_dtype: str = "float32") -> None:
        """
        Args:
            model_path: HF model directory the reference is built from (normally the policy's starting weights).
            logprob_dtype: dtype of the log_softmax used for token logprobs.
        """
        super().__init__()
        self.model_path = model_path
        self.logprob_dtype = getattr(torch, logprob_dtype)
        self.model: torch.nn.Module | None = None

    def build(self, mesh=None) -> None:
        if self.model is not None:
            return
        model = load_causal_lm(self.model_path)
        model.requires_grad_(False)
        model.eval()
        self.model = shard_module(model, mesh)

    def train(self, mode: bool = True) -> ReferenceModule:
        # Lightning puts the whole module tree in train mode each epoch; the reference stays in eval.
        super().train(False)
        return self

    @torch.no_grad()
    def score(self, traj: Trajectory, temperature: float = 1.0, micro_batch_size: int = 0) -> torch.Tensor:
        """Reference token logprobs [B, T] of the response."""
        assert self.model is not None
        parts = []
        for mb in micro_batches(traj, micro_batch_size):
            logits = response_logits(self.model, mb)
            parts.append(token_logprobs(logits, mb.response_ids, temperature=temperature, dtype=self.logprob_dtype))
        return torch.cat(parts, dim=0)
