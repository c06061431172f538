"""``sync``: publish the trainer's policy weights to the rollout engines, verified.

One call per published update, on EVERY rank (the gather and the probe forward are collective under FSDP2):

1. gather: ``get_model_state_dict(full_state_dict=True, cpu_offload=True)`` gives rank 0 the full HF-named tensors;
2. stream: rank 0 drops the tied LM head, casts to the engine's dtype and sends safetensors buckets of at most
   ``bucket_bytes`` to every replica (``rollout.worker_ext``), which buffer them;
3. commit: every replica reloads the buffered tensors in place, resets its prefix cache, and publishes ``version``;
4. verify: each replica reports the digest of the tensors it loaded, compared with the trainer's (always, unless
   ``verify=False``); the first sync of an engine (or ``verify="parity"``) also compares the engine's logprobs of fixed
   probe prompts with the trainer's forward, which catches a load that landed wrong (the CPU build repacks weights, so
   the bytes alone do not prove what the forward pass reads). A failure raises ``WeightSyncError`` naming the replica.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import nn

from lightning_rl.rollout.worker_ext import iter_payloads, tensors_digest

VerifyMode = bool | Literal["auto", "parity", "checksum"]

PROBE_PROMPTS = 4
PROBE_LENGTH = 32
FP32_PARITY_TOL = 1e-3
HALF_PARITY_TOL = 0.5


class WeightSyncError(RuntimeError):
    """The engines do not hold the weights the trainer published."""


# Engines whose first sync already passed the logprob-parity check (per process, so every rank decides alike).
_parity_checked: weakref.WeakSet[Any] = weakref.WeakSet()


def _dist() -> tuple[bool, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size() > 1, dist.get_rank()
    return False, 0


def local_target(engine: Any) -> Any:
    """The engine this process talks to: a rank-0 wrapper's inner engine (None on other ranks), else the engine."""
    return engine.local_engine if hasattr(engine, "local_engine") else engine


def gather_full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full, unsharded, CPU tensors on rank 0 and ``{}`` on the other ranks. COLLECTIVE under FSDP2."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {name: t for name, t in state.items() if isinstance(t, torch.Tensor)}


def export_tensors(
    state: dict[str, torch.Tensor], model: nn.Module, dtype: torch.dtype | None
) -> list[tuple[str, torch.Tensor]]:
    """The tensors the engine loads: HF names, the tied LM head dropped (vLLM ties it itself), cast to ``dtype``."""
    config = getattr(model, "config", None)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out = []
    for name, t in state.items():
        if tied and name == "lm_head.weight":
            continue
        if dtype is not None and t.is_floating_point() and t.dtype != dtype:
            t = t.to(dtype)
        out.append((name, t))
    return out


def default_probe_prompts(
    vocab_size: int, *, count: int = PROBE_PROMPTS, length: int = PROBE_LENGTH
) -> list[list[int]]:
    """Fixed pseudo-random token ids: identical on every rank and every run."""
    gen = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab_size, (count, length), generator=gen).tolist()


@torch.no_grad()
def policy_probe_logprobs(model: nn.Module, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
    """The trainer's log p(token_t | tokens_<t), t >= 1, per prompt. A forward pass: COLLECTIVE under FSDP2."""
    device = next(iter(model.parameters())).device
    was_training = model.training
    model.eval()
    try:
        out: list[list[float]] = []
        for p in prompts:
            ids = torch.tensor([list(p)], device=device)
            logits = model(input_ids=ids).logits[0, :-1].float()
            lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
            out.append(lp.cpu().tolist())
        return out
    finally:
        model.train(was_training)


def _parity_tol(model: nn.Module, engine_dtype: torch.dtype | None) -> float:
    dtypes = {p.dtype for p in model.parameters()} | ({engine_dtype} if engine_dtype is not None else set())
    half = any(d in (torch.bfloat16, torch.float16) for d in dtypes)
    return HALF_PARITY_TOL if half else FP32_PARITY_TOL


def _resolve_mode(engine: Any, verify: VerifyMode) -> str:
    if verify is False:
        return "none"
    if verify is True or verify == "auto":
        try:
            first = engine not in _parity_checked
        except TypeError:
            first = True
        return "parity" if first else "checksum"
    if verify not in ("parity", "checksum"):
        raise ValueError(f"verify: expected a bool, 'auto', 'parity' or 'checksum', got {verify!r}")
    return str(verify)


def _check_digests(expected: str, reports: list[list[dict[str, Any]]], version: int) -> str | None:
    for replica, workers in enumerate(reports):
        for worker, report in enumerate(workers):
            if report.get("digest") != expected:
                return (
                    f"weight sync to policy_version {version}: replica {replica} (worker {worker}) loaded tensors "
                    f"whose checksum {report.get('digest')} differs from the trainer's {expected}"
                )
    return None


def _max_diff(trainer: list[list[float]], engine: list[list[float]]) -> float:
    diffs = [abs(a - b) for t, e in zip(trainer, engine, strict=True) for a, b in zip(t, e, strict=True)]
    return max(diffs, default=0.0)


def sync(
    model: nn.Module,
    engine: Any,
    version: int,
    *,
    bucket_bytes: int | None = None,
    verify: VerifyMode = "auto",
    probe_prompts: Sequence[Sequence[int]] | None = None,
    parity_tol: float | None = None,
) -> dict[str, float]:
    """Publish ``model``'s weights to every replica of ``engine`` as ``version``; returns the ``weight_sync/*`` metrics.

    Call on every rank. ``verify``: "auto"/True = logprob parity on the engine's first sync, checksum afterwards;
    "parity" or "checksum" forces one; False skips verification. ``probe_prompts`` (token ids) default to fixed random
    ones; ``parity_tol`` defaults to 1e-3 (float32) or 0.5 (a 16-bit trainer or engine).
    """
    if not (hasattr(engine, "local_engine") or hasattr(engine, "begin_weight_update")):
        return _sync_generic(model, engine, version)
    distributed, rank = _dist()
    target = local_target(engine)
    mode = _resolve_mode(engine, verify)
    metrics: dict[str, float] = {"weight_sync/version": float(version)}
    failure: BaseException | str | None = None

    if getattr(engine, "transport", "bytes") == "nccl":  # GPU only, see weight_sync/nccl.py
        from lightning_rl.weight_sync.nccl import nccl_transfer

        try:
            nccl_transfer(model, engine, target, version, metrics)
        except Exception as err:
            failure = err
        mode = "none" if mode == "none" else "parity"  # vLLM's transfer engine reports no digest to compare
    else:
        state = gather_full_state(model)  # collective
        if rank == 0:
            try:
                failure = _transfer(state, model, target, version, bucket_bytes, mode != "none", metrics)
            except Exception as err:  # keep the collectives below in step with the other ranks, then raise
                failure = err
        del state
    if mode == "parity":
        parity_failure = _parity(model, target, version, probe_prompts, parity_tol, metrics, skip=failure is not None)
        failure = failure or parity_failure
    failure, metrics = _agree(engine, distributed, rank, failure, metrics)
    if failure is not None:
        if isinstance(failure, BaseException):
            raise failure
        raise WeightSyncError(failure)
    engine.version = version
    if mode == "parity":
        try:
            _parity_checked.add(engine)
        except TypeError:
            pass
    return metrics


def check_parity(
    model: nn.Module,
    engine: Any,
    *,
    probe_prompts: Sequence[Sequence[int]] | None = None,
    parity_tol: float | None = None,
) -> float:
    """Compare the engine's and the trainer's logprobs on the probe prompts; returns the max absolute difference over
    replicas, raises ``WeightSyncError`` naming the first replica beyond the tolerance. Call on every rank."""
    distributed, rank = _dist()
    metrics: dict[str, float] = {}
    failure = _parity(model, local_target(engine), int(engine.version), probe_prompts, parity_tol, metrics, skip=False)
    failure, metrics = _agree(engine, distributed, rank, failure, metrics)
    if failure is not None:
        if isinstance(failure, BaseException):
            raise failure
        raise WeightSyncError(failure)
    return metrics["weight_sync/max_logprob_diff"]


def _transfer(
    state: dict[str, torch.Tensor],
    model: nn.Module,
    target: Any,
    version: int,
    bucket_bytes: int | None,
    checksum: bool,
    metrics: dict[str, float],
) -> str | None:
    """Rank 0: stream the buckets into every replica, commit, compare the replicas' digests with the trainer's."""
    start = time.perf_counter()
    tensors = export_tensors(state, model, getattr(target, "weight_dtype", None))
    nbytes = 0
    target.begin_weight_update()
    for payload in iter_payloads(tensors, bucket_bytes):
        target.load_weight_bucket(payload)
        nbytes += len(payload)
    reports = target.finish_weight_update(version)
    seconds = time.perf_counter() - start
    metrics["weight_sync/seconds"] = seconds
    metrics["weight_sync/bytes"] = float(nbytes)
    metrics["weight_sync/gbps"] = nbytes / max(seconds, 1e-9) / 1e9
    if not checksum:
        return None
    verify_start = time.perf_counter()
    failure = _check_digests(tensors_digest(tensors), reports, version)
    metrics["weight_sync/verify_seconds"] = time.perf_counter() - verify_start
    return failure


def _parity(
    model: nn.Module,
    target: Any,
    version: int,
    probe_prompts: Sequence[Sequence[int]] | None,
    parity_tol: float | None,
    metrics: dict[str, float],
    *,
    skip: bool,
) -> BaseException | str | None:
    """Every rank runs the probe forward (collective under FSDP2); rank 0 compares it with each replica's logprobs."""
    start = time.perf_counter()
    if probe_prompts is not None:
        prompts = [list(p) for p in probe_prompts]
    else:
        vocab_size: Any = model.config.vocab_size  # type: ignore[union-attr]
        prompts = default_probe_prompts(int(vocab_size))
    trainer_lp = policy_probe_logprobs(model, prompts)
    failure: BaseException | str | None = None
    if target is not None and not skip:
        try:
            tol = parity_tol if parity_tol is not None else _parity_tol(model, getattr(target, "weight_dtype", None))
            diffs = [_max_diff(trainer_lp, lp) for lp in target.probe_logprobs(prompts)]
            metrics["weight_sync/max_logprob_diff"] = max(diffs)
            for replica, diff in enumerate(diffs):
                if not diff <= tol:
                    failure = (
                        f"weight sync to policy_version {version}: replica {replica} disagrees with the trainer's "
                        f"policy on the probe prompts: max |logprob difference| {diff:.3g} > tolerance {tol:g} "
                        "(the engine does not run the weights the trainer holds)"
                    )
                    break
        except Exception as err:
            failure = err
    metrics["weight_sync/verify_seconds"] = metrics.get("weight_sync/verify_seconds", 0.0) + (
        time.perf_counter() - start
    )
    return failure


def _agree(
    engine: Any, distributed: bool, rank: int, failure: BaseException | str | None, metrics: dict[str, float]
) -> tuple[BaseException | str | None, dict[str, float]]:
    """Rank 0's verdict and metrics, on every rank (so every rank raises, or none)."""
    if not distributed:
        return failure, metrics
    import torch.distributed as dist

    message = failure if failure is None or isinstance(failure, str) else f"{type(failure).__name__}: {failure}"
    box: list[Any] = [message, metrics]
    dist.broadcast_object_list(box, src=0, group=getattr(engine, "group", None))
    if rank == 0:
        return failure, box[1]
    return box[0], box[1]


def _sync_generic(model: nn.Module, engine: Any, version: int) -> dict[str, float]:
    """Engines outside the bucket protocol get ``update_weights``; one that samples from the policy itself
    (``shares_policy_weights = True``) only needs the version."""
    if getattr(engine, "shares_policy_weights", False):
        engine.update_weights((), version)
        engine.version = version
        return {"weight_sync/version": float(version)}
    start = time.perf_counter()
    state = gather_full_state(model)  # collective: every rank's engine gets called, rank > 0 with no tensors
    tensors = export_tensors(state, model, None)
    engine.update_weights(iter(tensors), version)
    seconds = time.perf_counter() - start
    nbytes = sum(t.numel() * t.element_size() for _, t in tensors)
    engine.version = version
    return {
        "weight_sync/version": float(version),
        "weight_sync/seconds": seconds,
        "weight_sync/bytes": float(nbytes),
        "weight_sync/gbps": nbytes / max(seconds, 1e-9) / 1e9,
    }
