"""GPU ONLY: weight sync into Ray-hosted vLLM engines through vLLM's NCCL weight-transfer engine.

Selected with ``rollout.weight_sync_transport=nccl`` (``vllm_ray`` backend on GPUs). Each replica gets its own
NCCL group: the trainer's rank 0 is NCCL rank 0, the replica's tensor-parallel workers follow (``rank_offset=1``). The
engines are built with ``weight_transfer_config={"backend": "nccl"}``; every sync runs vLLM's engine-side lifecycle
(``start_weight_update`` -> ``update_weights`` -> ``finish_weight_update``) while the trainer broadcasts each parameter,
one tensor at a time (``packed=False``: the one wire format every vLLM release with this engine agrees on). Where the
``packed`` flag travels (the per-round update info in vLLM 0.26, the init info in later releases) is read off the
installed vLLM's dataclasses; sending it in the other one is refused by vLLM's ``parse_*_info``.

Under FSDP2 the parameters are DTensors: every rank iterates ``named_parameters()`` in the same order and calls
``full_tensor()`` (a collective); only rank 0 broadcasts. The engine-side API changed across vLLM releases; the calls
that differ (``start_weight_update``'s argument, where ``packed`` lives, the trainer endpoint) are resolved once, at the
first sync, from the installed vLLM.

vLLM's transfer engine reports no digest of what it loaded, so every NCCL sync is verified by logprob parity on the
probe prompts (a forward of a few short prompts: cheap on GPU).

Not exercised by the CPU test suite (NCCL needs GPUs); see docs/rollout.md for its status.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import nn

NCCL_ENGINE_CONFIG = {"backend": "nccl"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _open_trainer_endpoint(init_info: dict[str, Any]) -> Any:
    """The trainer's PyNcclCommunicator (NCCL rank 0), from whichever helper the installed vLLM has."""
    try:  # vLLM >= 0.26 layout (the shared helper module)
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        return trainer_init(init_info)
    except ImportError:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        return NCCLWeightTransferEngine.trainer_init(init_info)  # type: ignore[attr-defined]


def _dataclass_fields(cls_name: str) -> set[str]:
    import dataclasses

    try:
        from vllm.distributed.weight_transfer import nccl_engine

        return {f.name for f in dataclasses.fields(getattr(nccl_engine, cls_name))}
    except (ImportError, AttributeError, TypeError):
        return set()


def packed_flag_location() -> str | None:
    """Where the installed vLLM's NCCL engine reads ``packed``: "update" (``NCCLWeightTransferUpdateInfo``, vLLM 0.26),
    "init" (``NCCLWeightTransferInitInfo``, later releases) or None (no such flag: one tensor at a time)."""
    if "packed" in _dataclass_fields("NCCLWeightTransferUpdateInfo"):
        return "update"
    if "packed" in _dataclass_fields("NCCLWeightTransferInitInfo"):
        return "init"
    return None


def _full(param: torch.Tensor) -> torch.Tensor:
    full_tensor = getattr(param, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else param


class NCCLWeightSender:
    """Trainer side of the NCCL transport for one engine (one NCCL group per replica, opened at the first sync)."""

    def __init__(self, actors: list[Any] | None) -> None:
        self.actors = actors  # None off rank 0: those ranks only join the FSDP gathers
        self.groups: list[Any] = []
        self.packed_at: str | None = None  # "init", "update" or None: see packed_flag_location

    def _connect(self) -> None:
        import ray

        assert self.actors is not None
        address = ray.util.get_node_ip_address()
        world_sizes = ray.get([a.call_llm.remote("get_world_size") for a in self.actors])
        start_sig = ray.get(self.actors[0].llm_signature.remote("start_weight_update"))
        self.start_kwargs = {"is_checkpoint_format": True} if "is_checkpoint_format" in start_sig else {}
        # vLLM's parse_init_info / parse_update_info refuse a key their dataclass lacks, so ``packed`` goes only where
        # the installed release reads it (vLLM 0.26: the update info; its init info has no such field).
        self.packed_at = packed_flag_location()
        for actor, engine_world in zip(self.actors, world_sizes, strict=True):
            port = _free_port()
            world = int(engine_world) + 1
            init = {"master_address": address, "master_port": port, "rank_offset": 1, "world_size": world}
            if self.packed_at == "init":
                init["packed"] = False
            with ThreadPoolExecutor(max_workers=1) as pool:
                request = {"init_info": init}
                pending = pool.submit(ray.get, actor.call_llm.remote("init_weight_transfer_engine", request))
                self.groups.append(
                    _open_trainer_endpoint({"master_address": address, "master_port": port, "world_size": world})
                )
                pending.result()

    def send(self, model: nn.Module, dtype: torch.dtype | None) -> int:
        """Broadcast every parameter to every replica; COLLECTIVE (every rank). Returns the bytes sent per replica."""
        named = [(n, p) for n, p in model.named_parameters()]  # shared (tied) parameters appear once
        if self.actors is None:
            for _, p in named:
                _full(p)
            return 0
        import ray

        if not self.groups:
            self._connect()
        out_dtype = [dtype if dtype is not None and p.is_floating_point() else p.dtype for _, p in named]
        update = {
            "names": [n for n, _ in named],
            "dtype_names": [str(d).split(".")[-1] for d in out_dtype],
            "shapes": [list(p.shape) for _, p in named],
        }
        if self.packed_at == "update":
            update["packed"] = False
        ray.get([a.call_llm.remote("start_weight_update", **self.start_kwargs) for a in self.actors])
        receiving = [a.call_llm.remote("update_weights", {"update_info": update}) for a in self.actors]
        stream = torch.cuda.current_stream()
        nbytes = 0
        for (_, p), d in zip(named, out_dtype, strict=True):
            t = _full(p.detach()).to(device=torch.cuda.current_device(), dtype=d).contiguous()
            for group in self.groups:
                group.broadcast(t, src=0, stream=stream)
            nbytes += t.numel() * t.element_size()
        stream.synchronize()
        ray.get(receiving)
        ray.get([a.call_llm.remote("finish_weight_update") for a in self.actors])
        ray.get([a.call_llm.remote("reset_prefix_cache") for a in self.actors])
        return nbytes

    def close(self) -> None:
        for group in self.groups:
            destroy = getattr(group, "destroy", None)
            if callable(destroy):
                destroy()
        self.groups = []


def nccl_transfer(model: nn.Module, engine: Any, target: Any, version: int, metrics: dict[str, float]) -> None:
    """Run one NCCL sync (every rank); rank 0 publishes ``version`` and fills the transfer metrics."""
    sender = getattr(engine, "_lrl_nccl_sender", None)
    if sender is None:
        sender = NCCLWeightSender(target.actors if target is not None else None)
        engine._lrl_nccl_sender = sender
    start = time.perf_counter()
    nbytes = sender.send(model, getattr(target, "weight_dtype", None) if target is not None else None)
    if target is not None:
        target.version = version
        target.ready = True
        seconds = time.perf_counter() - start
        metrics["weight_sync/seconds"] = seconds
        metrics["weight_sync/bytes"] = float(nbytes * len(sender.groups))
        metrics["weight_sync/gbps"] = nbytes * len(sender.groups) / max(seconds, 1e-9) / 1e9
