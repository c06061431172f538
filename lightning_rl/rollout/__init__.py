"""Rollout engines behind one protocol: ``hf`` (in-process generate), ``vllm`` (in-process engine), ``vllm_ray``."""

from lightning_rl.rollout.base import RolloutConfig, RolloutEngine, Sampling

__all__ = ["RolloutConfig", "RolloutEngine", "Sampling"]
