"""vLLM worker extension: receive policy weights as safetensors bytes and reload them in place.

vLLM mixes ``WeightSyncExtension`` into its worker (``LLM(worker_extension_cls=...)``), so the methods below are
reachable with ``llm.collective_rpc("lrl_...")``. Method names carry an ``lrl_`` prefix because vLLM refuses an
extension attribute that the worker already has. This module is also the wire format's other half (buckets, digest).

Why bytes: tensors passed as plain RPC arguments arrive as lists (vLLM's msgpack encoder), and the CPU build repacks
linear weights into oneDNN handles and leaves empty parameters behind, so a ``param.copy_`` would change nothing the
forward pass reads. vLLM's own ``reload_weights`` path re-runs the repack; the tied LM head needs one more repack
afterwards, because it keeps a packed copy of the old embedding.

Buckets are buffered until ``lrl_finish_update``: the model only changes when the whole state has arrived, so a failed
transfer never leaves a half-updated engine serving rollouts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch


def tensors_digest(tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """Order-independent-by-name content hash of named tensors: blake2b over (name, dtype, shape, raw bytes), sorted.

    The trainer and the engine run the same function on the same tensors, so equal digests mean the engine received
    exactly the bytes the trainer sent.
    """
    h = hashlib.blake2b(digest_size=16)
    for name, t in sorted(tensors, key=lambda kv: kv[0]):
        t = t.detach().contiguous().cpu()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def iter_buckets(
    tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int | None
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Named tensors in buckets of at most ``bucket_bytes`` (a larger tensor travels alone); None: one bucket."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in tensors:
        nbytes = t.numel() * t.element_size()
        if bucket and bucket_bytes is not None and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += nbytes
    if bucket:
        yield bucket


def serialize_bucket(bucket: list[tuple[str, torch.Tensor]]) -> bytes:
    """safetensors bytes of one bucket (tensors that share storage are copied: safetensors refuses aliases)."""
    from safetensors.torch import save

    seen: set[int] = set()
    flat: dict[str, torch.Tensor] = {}
    for name, t in bucket:
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        ptr = t.untyped_storage().data_ptr() if t.numel() else -1
        if ptr in seen or not t.is_contiguous():
            t = t.contiguous().clone()
        seen.add(ptr)
        flat[name] = t
    return save(flat)


def iter_payloads(tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int | None) -> Iterator[bytes]:
    for bucket in iter_buckets(tensors, bucket_bytes):
        yield serialize_bucket(bucket)


class BucketedWeightUpdates:
    """``update_weights`` for an engine that loads safetensors buckets: begin, stream every bucket, commit.

    The engine provides ``config.weight_sync_bucket_bytes``, ``begin_weight_update``, ``load_weight_bucket`` and
    ``finish_weight_update``; verification is ``weight_sync.sync``'s job.
    """

    config: Any

    if TYPE_CHECKING:  # provided by the engine class

        def begin_weight_update(self) -> Any: ...

        def load_weight_bucket(self, payload: bytes) -> Any: ...

        def finish_weight_update(self, version: int) -> Any: ...

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Load ``weights`` (HF names) into the engine and publish ``version``."""
        self.begin_weight_update()
        for payload in iter_payloads(weights, self.config.weight_sync_bucket_bytes):
            self.load_weight_bucket(payload)
        self.finish_weight_update(version)


class WeightSyncExtension:
    """Worker-side half of the CPU weight sync (methods run inside every vLLM worker)."""

    # Set by vLLM's Worker; declared for the type checker only.
    model_runner: Any
    vllm_config: Any

    def lrl_begin_update(self) -> None:
        self._lrl_pending: list[tuple[str, torch.Tensor]] = []

    def lrl_load_bucket(self, payload: bytes) -> int:
        """Decode one safetensors bucket and buffer it; returns the number of tensors it held."""
        from safetensors.torch import load

        tensors: Mapping[str, torch.Tensor] = load(payload)
        if not hasattr(self, "_lrl_pending"):
            self.lrl_begin_update()
        self._lrl_pending.extend(tensors.items())
        return len(tensors)

    def lrl_finish_update(self) -> dict[str, Any]:
        """Reload every buffered tensor in place, repack the tied head; returns the digest of what was loaded."""
        pending = getattr(self, "_lrl_pending", [])
        self._lrl_pending = []
        if not pending:
            raise RuntimeError("lrl_finish_update called with no weights received")
        digest = tensors_digest(pending)
        model = self.model_runner.get_model()
        self.reload_weights(weights_iterator=iter(pending), is_checkpoint_format=True)  # type: ignore[attr-defined]
        hf_config = self.vllm_config.model_config.hf_config
        if getattr(hf_config, "tie_word_embeddings", False) and hasattr(model, "lm_head"):
            # The CPU build packs the head's GEMM weight once at load; reload does not refresh the tied copy.
            quant_method = getattr(model.lm_head, "quant_method", None)
            if quant_method is not None:
                quant_method.process_weights_after_loading(model.lm_head)
        return {"digest": digest, "num_tensors": len(pending), "numel": sum(t.numel() for _, t in pending)}
