"""``weight_sync.sync`` and the rank-0 engine wrapper against an in-memory engine (no vLLM, no Ray).

The fake engine speaks the same bucket protocol as the vLLM engines: it decodes the safetensors buckets into HF models
(one per replica), reports the digest of what it loaded, and answers the probe with those models' logprobs. That makes
every failure path reachable: a replica that loads other bytes, a replica that runs other weights.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from lightning_rl.models.tiny import build_tiny_model
from lightning_rl.rollout.base import Sampling
from lightning_rl.rollout.worker_ext import tensors_digest
from lightning_rl.types import Completion
from lightning_rl.weight_sync import WeightSyncError, sync
from lightning_rl.weight_sync.sync import policy_probe_logprobs

pytestmark = pytest.mark.integration


class FakeEngine:
    """Replicas are HF models; ``corrupt`` = {replica: "bytes" | "weights"} injects a failure into one replica."""

    def __init__(self, replicas: int = 2, corrupt: dict[int, str] | None = None) -> None:
        self.replicas = [build_tiny_model(seed=99).eval() for _ in range(replicas)]
        self.num_replicas = replicas
        self.weight_dtype = torch.float32
        self.version = 0
        self.corrupt = corrupt or {}
        self.buckets = 0
        self.loaded_names: set[str] = set()
        self.generate_error: Exception | None = None

    def begin_weight_update(self) -> None:
        self.pending: list[tuple[str, torch.Tensor]] = []

    def load_weight_bucket(self, payload: bytes) -> None:
        from safetensors.torch import load

        self.pending.extend(load(payload).items())
        self.buckets += 1

    def finish_weight_update(self, version: int) -> list[list[dict]]:
        reports = []
        self.loaded_names = {name for name, _ in self.pending}
        for i, model in enumerate(self.replicas):
            state = dict(self.pending)
            if self.corrupt.get(i) == "bytes":
                state = {k: v + 1e-3 for k, v in state.items()}
            model.load_state_dict(state, strict=False)
            if self.corrupt.get(i) == "weights":  # loads the right bytes, then runs something else
                with torch.no_grad():
                    model.model.norm.weight.mul_(3.0)
            reports.append([{"digest": tensors_digest(state.items())}])
        self.version = version
        return reports

    def close(self) -> None:
        self.replicas = []

    def probe_logprobs(self, prompts):
        return [policy_probe_logprobs(m, prompts) for m in self.replicas]

    def generate(self, prompt_token_ids, sampling: Sampling) -> list[Completion]:
        if self.generate_error is not None:
            raise self.generate_error
        return [
            Completion(i, list(p), [p[0], k], [-1.0, -1.0], "length", "", self.version)
            for i, p in enumerate(prompt_token_ids)
            for k in range(sampling.n)
        ]


def trained_policy(seed: int = 0):
    policy = build_tiny_model(seed=seed)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    ids = torch.randint(3, 100, (2, 16), generator=torch.Generator().manual_seed(seed))
    policy(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    return policy.eval()


def test_first_sync_checks_parity_then_checksums_and_streams_buckets():
    engine, policy = FakeEngine(), trained_policy()
    metrics = sync(policy, engine, 1, bucket_bytes=64 << 10)
    assert engine.version == 1 and engine.buckets > 1
    assert "lm_head.weight" not in engine.loaded_names  # tied: the engine re-ties it itself
    assert metrics["weight_sync/max_logprob_diff"] <= 1e-6
    assert metrics["weight_sync/bytes"] >= sum(p.numel() * 4 for p in policy.parameters())
    assert set(metrics) >= {"weight_sync/seconds", "weight_sync/gbps", "weight_sync/verify_seconds"}

    metrics = sync(policy, engine, 2)
    assert "weight_sync/max_logprob_diff" not in metrics and engine.version == 2


def test_a_replica_running_other_weights_fails_the_parity_check_by_name():
    engine = FakeEngine(corrupt={1: "weights"})
    with pytest.raises(WeightSyncError, match=r"replica 1 disagrees .* max \|logprob difference\|"):
        sync(trained_policy(), engine, 1)


def test_a_replica_loading_other_bytes_fails_the_checksum_by_name():
    engine = FakeEngine(corrupt={0: "bytes"})
    with pytest.raises(WeightSyncError, match="replica 0 .* checksum"):
        sync(trained_policy(), engine, 1, verify="checksum")
    sync(trained_policy(), FakeEngine(corrupt={0: "bytes"}), 1, verify=False)  # unverified: no error


def test_engines_sharing_the_policy_only_publish_the_version():
    class Shared:
        shares_policy_weights = True
        version = 0

        def update_weights(self, weights, version):
            assert list(weights) == []

    engine = Shared()
    assert sync(trained_policy(), engine, 3) == {"weight_sync/version": 3.0}
    assert engine.version == 3


def test_rank_zero_engine_and_sync_under_fsdp2_on_two_ranks(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_two_rank_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert results[0]["metrics"] == results[1]["metrics"]
    assert results[0]["metrics"]["weight_sync/max_logprob_diff"] <= 1e-5
    for rank, res in enumerate(results):
        # Each rank gets its own prompts back (local prompt_index), n completions each, prompt-major.
        assert res["prompt_index"] == [i for i in range(rank + 1) for _ in range(2)]
        assert res["first_tokens"] == [100 + rank * 10 + i for i in range(rank + 1) for _ in range(2)]
        assert res["version"] == 1
        assert "rollout failed" in res["error"] or "boom" in res["error"]


def _two_rank_worker(rank: int, world_size: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import lightning_rl.rollout.build as build
    from lightning_rl.rollout.base import RolloutConfig

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        mesh = init_device_mesh("cpu", (world_size,))
        policy = build_tiny_model(seed=0)
        for layer in policy.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(policy, mesh=mesh)
        opt = torch.optim.AdamW(policy.parameters(), lr=1e-2)
        ids = torch.randint(3, 100, (2, 16), generator=torch.Generator().manual_seed(rank))
        policy(input_ids=ids, labels=ids).loss.backward()
        opt.step()

        build._make_vllm_engine = lambda config, path: FakeEngine()  # only rank 0 may build it
        engine = build.build_engine(RolloutConfig(backend="vllm"), "unused")
        assert (engine.local_engine is not None) == (rank == 0)
        metrics = sync(policy, engine, 1, bucket_bytes=32 << 10)

        prompts = [[100 + rank * 10 + i, 7] for i in range(rank + 1)]  # ranks bring different counts
        completions = engine.generate(prompts, Sampling(n=2))
        if rank == 0:
            engine.local_engine.generate_error = RuntimeError("boom")
        try:
            engine.generate(prompts, Sampling())
            error = ""
        except Exception as err:  # rank 0 re-raises its own error, the others learn of it
            error = str(err)
        torch.save(
            {
                "metrics": metrics,
                "prompt_index": [c.prompt_index for c in completions],
                "first_tokens": [c.token_ids[0] for c in completions],
                "version": engine.version,
                "error": error,
            },
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
        engine.close()
    finally:
        dist.destroy_process_group()
