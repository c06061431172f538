"""The policy role: a causal LM that is sampled from, scored, trained, and exported."""

from __future__ import annotations

import torch
from lightning.pytorch import LightningModule

from lightning_rl.algorithms import entropy_from_logits, token_logprobs
from lightning_rl.roles.common import OptimizerConfig, load_causal_lm, response_logits, shard_module
from lightning_rl.types import Trajectory


class PolicyModule(LightningModule):
    """The trainable actor. Weights load in ``configure_model`` (called by the method), never in ``__init__``."""

    def __init__(
        self,
        model_path: str,
        optimizer: OptimizerConfig | None = None,
        logprob_dtype: str = "float32",
        init_seed: int = 0,
    ) -> None:
        """
        Args:
            model_path: HF model directory, or ``tiny`` for a fresh tiny model.
            optimizer: AdamW settings.
            logprob_dtype: dtype of the log_softmax used for token logprobs (float32 or float64).
            init_seed: seed of a fresh ``tiny`` model's initialisation.
        """
        super().__init__()
        self.model_path = model_path
        self.optimizer_config = optimizer or OptimizerConfig()
        if logprob_dtype not in ("float32", "float64"):
            raise ValueError(f"policy.logprob_dtype must be float32 or float64, got {logprob_dtype!r}")
        self.logprob_dtype = getattr(torch, logprob_dtype)
        self.init_seed = init_seed
        self.model: torch.nn.Module | None = None

    def build(self, mesh=None) -> None:
        if self.model is not None:
            return
        self.model = load_causal_lm(self.model_path, seed=self.init_seed)
        shard_module(self.model, mesh)

    def build_optimizer(self, total_steps: int = 0):
        assert self.model is not None
        return self.optimizer_config.build(self.model.parameters(), total_steps)

    def forward_logprobs(
        self, traj: Trajectory, temperature: float = 1.0, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Token logprobs [B, T] of the response under the current weights (and entropy [B, T] when asked)."""
        assert self.model is not None
        logits = response_logits(self.model, traj)
        logp = token_logprobs(logits, traj.response_ids, temperature=temperature, dtype=self.logprob_dtype)
        entropy = entropy_from_logits(logits, temperature=temperature) if with_entropy else None
        return logp, entropy

    @torch.no_grad()
    def score(self, traj: Trajectory, temperature: float = 1.0, micro_batch_size: int = 0) -> torch.Tensor:
        """Frozen token logprobs [B, T] (no grad), computed in micro-batches."""
        parts = [self.forward_logprobs(mb, temperature)[0] for mb in micro_batches(traj, micro_batch_size)]
        return torch.cat(parts, dim=0)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """Full (unsharded) weights on rank 0, {} on other ranks. Collective: call on every rank."""
        assert self.model is not None
        return full_state_dict(self.model)


def micro_batches(traj: Trajectory, size: int):
    """Consecutive slices of at most ``size`` sequences (the whole batch when size <= 0)."""
    n = traj.batch_size[0]
    if size <= 0 or size >= n:
        yield traj
        return
    for start in range(0, n, size):
        yield traj[start : start + size]


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
