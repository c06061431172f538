"""A progress bar that counts outer iterations and shows the reward and the phase running now."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import TQDMProgressBar
from typing_extensions import override


class RLProgressBar(TQDMProgressBar):
    """Iteration i/max_steps, the last iteration's reward, and the current phase (rollout, reward, update, ...)."""

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        max_steps = getattr(pl_module, "max_steps", None)
        if max_steps and self.train_progress_bar is not None:
            self.train_progress_bar.reset(total=max_steps)
            self.train_progress_bar.initial = 0
            self.train_progress_bar.set_description("iteration")

    def on_phase_change(self, trainer: Trainer, pl_module: LightningModule, phase: str) -> None:
        if not self.is_enabled or self.train_progress_bar is None:
            return
        self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    @override
    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        shown: dict[str, Any] = {"phase": getattr(pl_module, "current_phase", "")}
        last = getattr(pl_module, "last_metrics", {}) or {}
        for key, label in (("train/reward_mean", "reward"), ("train/sft_loss", "loss"), ("eval/exact_match", "eval")):
            if key in last:
                shown[label] = f"{last[key]:.3f}"
        return shown
