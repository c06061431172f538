"""``build_engine``: the rollout backend a config names, and its rank-0 wrapper for distributed trainers.

Under a process group of several ranks only rank 0 builds and talks to the vLLM engines. Every rank gets a
``RankZeroEngine``: its ``generate`` gathers all ranks' prompts to rank 0 (object collectives on a gloo group),
generates there once, and hands each rank back its own completions, so the methods code the same for one rank or many.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from lightning_rl.errors import ConfigError
from lightning_rl.rollout.base import RolloutConfig, RolloutEngine, Sampling
from lightning_rl.types import Completion


def _world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class RemoteRolloutError(RuntimeError):
    """Rank 0's engine failed; raised on every other rank so no rank waits forever."""


class RankZeroEngine:
    """The engine on rank 0, a proxy on the other ranks; all calls are COLLECTIVE (call them on every rank)."""

    def __init__(self, inner: Any | None, group: Any | None, transport: str = "bytes") -> None:
        self.rank, self.world_size = _world()
        if (inner is None) != (self.rank != 0):
            raise ValueError("RankZeroEngine: rank 0 (and only rank 0) holds the engine")
        self.inner = inner
        self.group = group
        self.transport = transport  # how weight_sync.sync reaches the engines (known on every rank)
        self._lrl_nccl_sender: Any = None
        self._version = int(inner.version) if inner is not None else 0

    @property
    def local_engine(self) -> Any | None:
        """The engine this rank talks to (None off rank 0); ``weight_sync.sync`` uses it."""
        return self.inner

    @property
    def version(self) -> int:
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = int(value)
        if self.inner is not None:
            self.inner.version = int(value)

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: Sampling) -> list[Completion]:
        import torch.distributed as dist

        mine = [list(p) for p in prompt_token_ids]
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(mine, gathered, dst=0, group=self.group)
        shares: list[Any] | None = None
        failure: BaseException | None = None
        if self.rank == 0:
            assert gathered is not None and self.inner is not None
            try:
                shares = self._generate_for_all(gathered, sampling)
            except Exception as err:  # every rank must leave the scatter below
                failure = err
                shares = [f"rank 0 rollout failed: {type(err).__name__}: {err}"] * self.world_size
        box: list[Any] = [None]
        dist.scatter_object_list(box, shares, src=0, group=self.group)
        if failure is not None:
            raise failure
        if isinstance(box[0], str):
            raise RemoteRolloutError(box[0])
        return box[0]

    def _generate_for_all(self, per_rank: list[list[list[int]]], sampling: Sampling) -> list[list[Completion]]:
        assert self.inner is not None
        flat = [p for prompts in per_rank for p in prompts]
        completions = self.inner.generate(flat, sampling) if flat else []
        self._version = int(self.inner.version)
        shares: list[list[Completion]] = []
        start = 0
        for prompts in per_rank:
            end = start + len(prompts)
            share = [c for c in completions if start <= c.prompt_index < end]
            for c in share:
                c.prompt_index -= start
            shares.append(share)
            start = end
        return shares

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Rank 0 loads ``weights`` (only rank 0's are used); every rank records ``version``."""
        if self.inner is not None:
            self.inner.update_weights(weights, version)
        self.version = version

    def sleep(self) -> None:
        if self.inner is not None:
            self.inner.sleep()

    def wake_up(self) -> None:
        if self.inner is not None:
            self.inner.wake_up()

    def close(self) -> None:
        sender, self._lrl_nccl_sender = self._lrl_nccl_sender, None
        if sender is not None:
            sender.close()
        inner, self.inner = self.inner, None
        if inner is not None:
            inner.close()

    def __getattr__(self, name: str) -> Any:
        # Engine attributes (vocab_size, weight_dtype, ready, num_replicas, ...) read through to rank 0's engine.
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)


def _make_vllm_engine(config: RolloutConfig, model_path: str) -> RolloutEngine:
    if config.backend == "vllm":
        from lightning_rl.rollout.vllm import VLLMEngine

        return VLLMEngine(config, model_path)
    from lightning_rl.rollout.ray import RayVLLMEngine

    return RayVLLMEngine(config, model_path)


def build_engine(
    config: RolloutConfig,
    model_path: str,
    policy_model: torch.nn.Module | None = None,
    hf_engine_factory: Callable[[], RolloutEngine] | None = None,
) -> RolloutEngine:
    """The engine ``config.backend`` names: hf -> ``hf_engine_factory()``; vllm -> ``VLLMEngine``; vllm_ray ->
    ``RayVLLMEngine``.

    With a process group of several ranks, the vLLM backends are built on rank 0 only and wrapped in ``RankZeroEngine``
    on every rank (call this on every rank). ``policy_model`` is not needed by the vLLM backends (they load
    ``model_path``; ``weight_sync.sync`` then publishes the live policy).
    """
    del policy_model
    if config.backend == "hf":
        if hf_engine_factory is None:
            raise ConfigError("rollout.backend=hf: the method must pass hf_engine_factory to build_engine")
        return hf_engine_factory()
    rank, world_size = _world()
    if world_size == 1:
        return _make_vllm_engine(config, model_path)

    import torch.distributed as dist

    group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    inner, failure = None, None
    if rank == 0:
        try:
            inner = _make_vllm_engine(config, model_path)
        except Exception as err:
            failure = err
    box: list[Any] = [None if failure is None else f"{type(failure).__name__}: {failure}"]
    dist.broadcast_object_list(box, src=0, group=group)
    if failure is not None:
        raise failure
    if box[0] is not None:
        raise RemoteRolloutError(f"rank 0 could not build the rollout engine: {box[0]}")
    return RankZeroEngine(inner, group, transport=config.weight_sync_transport or "bytes")
