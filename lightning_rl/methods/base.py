"""What every method module shares: role building, the iteration clock, phase timing, metric logging, and engines.

A method is one LightningModule composing role modules. Lightning drives it with ``Trainer.fit``; one training batch (a
batch of prompts, or of preference pairs) is ONE outer iteration, run under manual optimization. ``max_steps`` counts
those iterations: Lightning's ``global_step`` counts optimizer steps under manual optimization and is never used here.
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch import LightningModule

from lightning_rl.errors import ConfigError
from lightning_rl.roles.common import OptimizerConfig, load_tokenizer
from lightning_rl.roles.policy import PolicyModule


class NonFiniteGradientError(RuntimeError):
    """A role's gradients were not finite: the update was rejected and the run stops."""


@dataclass
class Plan:
    """The derived batch plan that ``validate`` prints and ``fit`` runs."""

    method: str
    world_size: int
    lines: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        width = max(len(k) for k in self.lines) if self.lines else 0
        body = "\n".join(f"  {k.ljust(width)}  {v}" for k, v in self.lines.items())
        return f"plan ({self.method}, {self.world_size} process{'es' if self.world_size != 1 else ''}):\n{body}"


def world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def reduce_metrics(metrics: dict[str, float], max_keys: tuple[str, ...] = ("_max",)) -> dict[str, float]:
    """Mean over ranks (max for keys ending in one of ``max_keys``); identical on every rank afterwards."""
    _, size = world()
    if size == 1 or not metrics:
        return dict(metrics)
    keys = sorted(metrics)
    is_max = [any(k.endswith(s) for s in max_keys) for k in keys]
    values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    mean_part = torch.where(torch.tensor(is_max), torch.zeros_like(values), values)
    max_part = torch.where(torch.tensor(is_max), values, torch.full_like(values, -float("inf")))
    dist.all_reduce(mean_part, op=dist.ReduceOp.SUM)
    dist.all_reduce(max_part, op=dist.ReduceOp.MAX)
    out = torch.where(torch.tensor(is_max), max_part, mean_part / size)
    return {k: float(v) for k, v in zip(keys, out.tolist(), strict=True)}


class RLMethod(LightningModule):
    """Base of every method module. Subclasses set ``roles`` and implement ``run_iteration`` and ``plan``."""

    method_name = "method"
    policy: PolicyModule  # every method trains (or distils into) a policy role

    def __init__(self, max_steps: int = 100) -> None:
        super().__init__()
        if max_steps < 1:
            raise ConfigError(f"model.max_steps must be >= 1 (outer iterations), got {max_steps}")
        self.max_steps = max_steps
        self.automatic_optimization = False
        self.iteration = 0  # outer iterations completed; the metric step and checkpoint name
        self.policy_version = 0  # published actor updates; the rollout staleness contract
        self.role_steps: dict[str, int] = {}  # optimizer steps each trainable role has taken
        self.tokenizer: Any = None
        self.current_phase = "setup"
        self.last_metrics: dict[str, float] = {}
        self._phase_seconds: dict[str, float] = {}

    # ----- roles ------------------------------------------------------------------------------------------------------
    def trainable_roles(self) -> list[Any]:
        """Roles with an optimizer, in the stable order their optimizers are returned (checkpoint order)."""
        return []

    def frozen_roles(self) -> list[Any]:
        """Roles without an optimizer (the reference, a teacher)."""
        return []

    def all_roles(self) -> list[Any]:
        return self.trainable_roles() + self.frozen_roles()

    def configure_model(self) -> None:
        mesh = self.device_mesh if _has_mesh(self) else None
        for role in self.all_roles():
            role.build(mesh)

    def configure_optimizers(self):
        optimizers, schedulers = [], []
        for role in self.trainable_roles():
            opt, sched = role.build_optimizer(self.max_steps * self.optimizer_steps_per_iteration())
            optimizers.append(opt)
            schedulers.append({"scheduler": sched, "interval": "step"})
        return optimizers, schedulers

    # ----- the iteration ----------------------------------------------------------------------------------------------
    @abstractmethod
    def rows_per_iteration(self) -> int:
        """Data rows (prompts or pairs) one iteration consumes over all processes."""

    def setup(self, stage: str) -> None:
        """Load the tokenizer and tell the data module how many rows each process takes per iteration."""
        self.tokenizer = load_tokenizer(self.policy.model_path)
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is not None and hasattr(datamodule, "set_batch_size"):
            datamodule.set_batch_size(self.rows_per_iteration() // world()[1])

    def role_optimizer_step(self, role: str, model, opt, sched, config: OptimizerConfig) -> float:
        """Clip, check finiteness (reject without a step), step, zero the role's gradients; returns the grad norm."""
        params = [p for p in model.parameters() if p.grad is not None]
        max_norm = config.grad_clip_norm if config.grad_clip_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        grad_norm = float(norm)
        if not math.isfinite(grad_norm):
            opt.zero_grad(set_to_none=True)
            raise NonFiniteGradientError(
                f"iteration {self.iteration + 1}: the {role} gradients are not finite (norm {grad_norm}); the update "
                f"was rejected without a step. Lower the {role} learning rate or check the reward/loss for NaNs."
            )
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        self.role_steps[role] = self.role_steps.get(role, 0) + 1
        return grad_norm

    def optimizer_steps_per_iteration(self) -> int:
        """Optimizer steps each trainable role takes in one iteration (sizes the LR schedules)."""
        return 1

    @abstractmethod
    def plan(self, world_size: int) -> Plan:
        """Check every cross-knob rule for ``world_size`` processes and derive the batch plan (raises ConfigError)."""

    @abstractmethod
    def run_iteration(self, batch: Any) -> dict[str, float]:
        """Run one outer iteration on this rank's batch and return its (rank-local) metrics."""

    def on_fit_start(self) -> None:
        _, size = world()
        self.plan(size)  # the same rules `validate` checks, now with the real world size

    def training_step(self, batch: Any, batch_idx: int) -> None:
        self._phase_seconds = {}
        start = time.perf_counter()
        metrics = self.run_iteration(batch)
        self.iteration += 1
        metrics = reduce_metrics(metrics)
        metrics.update({f"time/{k}": v for k, v in self._phase_seconds.items()})
        metrics["time/step"] = time.perf_counter() - start
        metrics["train/iteration"] = float(self.iteration)
        self.current_phase = "done"
        self.last_metrics = metrics
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.iteration)
        self.log_dict({k: v for k, v in metrics.items() if not k.startswith("time/")}, logger=False, on_step=True)
        if self.iteration >= self.max_steps:
            self.trainer.should_stop = True

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time one phase of the iteration (``time/<name>``) and tell the progress bar what is running."""
        self.current_phase = name
        if self._trainer is not None:
            for cb in getattr(self.trainer, "callbacks", []):
                hook = getattr(cb, "on_phase_change", None)
                if hook is not None:
                    hook(self.trainer, self, name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self._phase_seconds[name] = self._phase_seconds.get(name, 0.0) + time.perf_counter() - start

    # ----- checkpoint -------------------------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["lightning_rl"] = {
            "iteration": self.iteration,
            "policy_version": self.policy_version,
            "role_steps": dict(self.role_steps),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("lightning_rl", {})
        self.iteration = int(state.get("iteration", 0))
        self.policy_version = int(state.get("policy_version", 0))
        self.role_steps = {role: int(n) for role, n in state.get("role_steps", {}).items()}


def _has_mesh(module: LightningModule) -> bool:
    try:
        return module.device_mesh is not None
    except Exception:
        return False
