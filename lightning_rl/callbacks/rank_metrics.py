"""Write every rank's per-iteration metrics to ``<run dir>/metrics_rank<r>.jsonl`` (for checking that ranks agree)."""

from __future__ import annotations

import json
import os
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override


class RankMetricsDump(Callback):
    """Each rank appends its copy of the iteration's metrics; the loggers only ever see rank 0's."""

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        metrics = getattr(pl_module, "last_metrics", None)
        if not metrics:
            return
        path = os.path.join(trainer.default_root_dir, f"metrics_rank{trainer.global_rank}.jsonl")
        row = {k: v for k, v in metrics.items() if not k.startswith("time/")}
        with open(path, "a") as f:
            f.write(json.dumps({"iteration": getattr(pl_module, "iteration", None), **row}) + "\n")
