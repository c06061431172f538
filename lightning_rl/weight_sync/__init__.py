"""Moving the trainer's policy weights into the rollout engines: one entry point, ``sync``.

Transports: the vLLM worker extension fed with safetensors buckets (CPU and GPU, ``rollout/worker_ext.py``) and vLLM's
NCCL weight-transfer engine (GPU only, ``weight_sync/nccl.py``).
"""

from lightning_rl.weight_sync.sync import WeightSyncError, check_parity, gather_full_state, sync

__all__ = ["WeightSyncError", "check_parity", "gather_full_state", "sync"]
