"""Shared fixtures: a tiny HF model directory built once per session, and Ray torn down after every test module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3 model + char tokenizer in HF format (float32, tied embeddings), shared by the whole session."""
    from lightning_rl.models.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(autouse=True, scope="module")
def _shutdown_ray_after_module():
    """A module that leaves Ray running (by design or by failing) must not leak it into the next one. Module scope,
    so a module may share one Ray cluster (and its engines) between its tests."""
    yield
    ray = sys.modules.get("ray")  # never import ray here: unit tests must run without it
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(autouse=True)
def _destroy_process_group_after_test():
    """In-process fits initialise a (gloo) process group; the next test must start without one."""
    yield
    import os

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    # Lightning exports the rendezvous of an in-process run; a later run (or a child process) must pick its own port.
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", "RANK"):
        os.environ.pop(key, None)
