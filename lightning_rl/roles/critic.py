"""The critic role: the policy's backbone with a scalar value head."""

from __future__ import annotations

from typing import cast

import torch
from lightning.pytorch import LightningModule
from torch import nn

from lightning_rl.roles.common import OptimizerConfig, load_causal_lm, position_ids, shard_module
from lightning_rl.roles.policy import micro_batches
from lightning_rl.types import Trajectory


class ValueModel(nn.Module):
    """A decoder backbone plus ``value_head``: hidden state -> scalar V(s)."""

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.model = backbone  # named like the causal LM's base so sharding finds ``.model.layers``
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Values [B, L] at every position (the head runs inside the root forward so FSDP2 has its params gathered)."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids(attention_mask),
            use_cache=False,
        )
        # a fresh tensor, not a view: FSDP2 hooks the root output for backward
        return self.value_head(out.last_hidden_state).squeeze(-1).float().clone()


class CriticModule(LightningModule):
    """The trainable value function, initialised from a causal LM's backbone (its LM head is dropped)."""

    def __init__(self, model_path: str, optimizer: OptimizerConfig | None = None, init_seed: int = 0) -> None:
        """
        Args:
            model_path: HF model directory whose backbone the critic starts from (normally the policy's).
            optimizer: AdamW settings of the critic.
            init_seed: seed of a fresh ``tiny`` backbone.
        """
        super().__init__()
        self.model_path = model_path
        self.optimizer_config = optimizer or OptimizerConfig()
        self.init_seed = init_seed
        self.model: ValueModel | None = None

    def build(self, mesh=None) -> None:
        if self.model is not None:
            return
        lm = load_causal_lm(self.model_path, seed=self.init_seed)
        self.model = ValueModel(cast(nn.Module, lm.model), int(getattr(lm.config, "hidden_size")))  # noqa: B009
        shard_module(self.model, mesh)

    def build_optimizer(self, total_steps: int = 0):
        assert self.model is not None
        return self.optimizer_config.build(self.model.parameters(), total_steps)

    def forward_values(self, traj: Trajectory) -> torch.Tensor:
        """V(s_t) [B, T] for every response position t."""
        assert self.model is not None
        p, t = traj.prompt_ids.shape[1], traj.response_ids.shape[1]
        values = self.model(traj.input_ids, traj.attention_mask.long())
        return values[:, p - 1 : p + t - 1]

    @torch.no_grad()
    def predict(self, traj: Trajectory, micro_batch_size: int = 0) -> torch.Tensor:
        return torch.cat([self.forward_values(mb) for mb in micro_batches(traj, micro_batch_size)], dim=0)
