"""Lightning callbacks: display and bookkeeping the methods do not need to be correct."""

from lightning_rl.callbacks.hf_export import HFExport
from lightning_rl.callbacks.progress import RLProgressBar
from lightning_rl.callbacks.rank_metrics import RankMetricsDump

__all__ = ["HFExport", "RLProgressBar", "RankMetricsDump"]
