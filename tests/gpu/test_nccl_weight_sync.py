"""GPU ONLY: the NCCL weight-sync path (``weight_sync/nccl.py``) into a Ray-hosted vLLM engine, end to end.

The trainer's model lives on GPU 0; one ``vllm_ray`` engine (``weight_sync_transport="nccl"``) gets GPU 1. The test
trains the HF model one AdamW step, publishes it with ``lightning_rl.weight_sync.sync`` (vLLM's NCCL weight-transfer
engine, verified by logprob parity), checks that the engine's greedy generations change, syncs a second update, then
closes the engine and checks that no Ray or vLLM process survives.

Marked ``gpu``: ``make test`` deselects it and it skips without two CUDA devices. Run it on a GPU machine with::

    python -m pytest -q -m gpu tests/gpu -s

The model is a Qwen3 of about 350M parameters (0.7 GB in bf16) so the transfer rate means something;
``LRL_GPU_SYNC_MODEL=tiny`` uses the 0.8M-parameter test model instead. ``LRL_GPU_SYNC_RESULTS=path`` also writes the
numbers as JSON.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.ray,
    pytest.mark.vllm,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2,
        reason="needs two CUDA devices (trainer on one, the vLLM engine on the other)",
    ),
]

# hidden 1024, 28 layers, 16/8 heads of 64: ~352M parameters; the char tokenizer's 128-token vocabulary is kept so the
# engine can detokenize whatever it samples.
MEDIUM = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
}
PROMPTS = [[5 + i, 6 + i, 7 + i, 8 + i, 9 + i, 10 + i] for i in range(0, 80, 10)]


def _model_kwargs() -> dict[str, int]:
    return {} if os.environ.get("LRL_GPU_SYNC_MODEL", "medium") == "tiny" else dict(MEDIUM)


def _train_step(model: torch.nn.Module, *, seed: int, lr: float = 1e-3) -> float:
    """One AdamW step of next-token loss on random sequences (on the model's device); returns the loss."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(7, int(model.config.vocab_size), (8, 64), generator=gen).to(next(model.parameters()).device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.eval()
    torch.cuda.synchronize()
    return float(loss.detach())


def _live_children(exclude: set[int]) -> list[str]:
    import psutil

    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid in exclude or child.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(child.cmdline())
            if "multiprocessing.resource_tracker" in cmd:
                continue
            alive.append(f"{child.pid} {cmd[:120]}")
        except psutil.NoSuchProcess:
            continue
    return alive


def _wait_for_no_children(exclude: set[int], timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        alive = _live_children(exclude)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


def _gpu_processes(index: int) -> list[int] | None:
    """PIDs NVML sees on GPU ``index`` (None when NVML cannot tell)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def _report(tag: str, metrics: dict[str, float]) -> str:
    keys = ("seconds", "bytes", "gbps", "max_logprob_diff", "verify_seconds")
    return f"NCCL_SYNC {tag} " + " ".join(f"{k}={metrics.get('weight_sync/' + k, float('nan')):.6g}" for k in keys)


def test_nccl_sync_into_a_ray_vllm_engine(tmp_path):
    pytest.importorskip("vllm")
    ray = pytest.importorskip("ray")
    import psutil
    from transformers import AutoModelForCausalLM

    from lightning_rl.models.tiny import save_tiny_model
    from lightning_rl.rollout.base import RolloutConfig, Sampling
    from lightning_rl.rollout.build import build_engine
    from lightning_rl.weight_sync import sync

    # NVLink multicast stays off on shared hosts (the Ray actors and vLLM's workers inherit this environment).
    for key, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")):
        os.environ.setdefault(key, value)
    assert not ray.is_initialized()
    results: dict[str, object] = {"model": os.environ.get("LRL_GPU_SYNC_MODEL", "medium")}

    t0 = time.perf_counter()
    model_dir = save_tiny_model(tmp_path / "model", **_model_kwargs())
    torch.cuda.set_device(0)
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to("cuda:0").eval()
    n_params = sum(p.numel() for p in policy.parameters())
    results["parameters"] = n_params
    print(f"\nNCCL_SYNC model params={n_params} built+loaded in {time.perf_counter() - t0:.1f}s", flush=True)

    # The engine takes GPU 1 only: Ray (started by the engine) reads CUDA_VISIBLE_DEVICES when it starts, while this
    # process already holds its CUDA context on GPU 0 (set before the change, so the trainer keeps it).
    baseline = {p.pid for p in psutil.Process().children(recursive=True)}
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = "1"
    config = RolloutConfig(
        backend="vllm_ray",
        weight_sync_transport="nccl",
        dtype="bfloat16",
        gpu_memory_utilization=0.3,
        seed=0,
    )
    t0 = time.perf_counter()
    try:
        engine = build_engine(config, str(model_dir))
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    results["engine_start_seconds"] = time.perf_counter() - t0
    print(f"NCCL_SYNC engine started in {results['engine_start_seconds']:.1f}s", flush=True)
    closed = False
    try:
        assert engine.transport == "nccl" and engine.weight_dtype == torch.bfloat16
        greedy = Sampling(temperature=0.0, max_tokens=16, ignore_eos=True)
        before = engine.generate(PROMPTS, greedy)

        for version in (1, 2):
            loss = _train_step(policy, seed=version)
            metrics = sync(policy, engine, version)
            print(_report(f"v{version}", metrics) + f" loss={loss:.4f}", flush=True)
            results[f"sync_v{version}"] = metrics
            assert engine.version == version and metrics["weight_sync/version"] == version
            # NCCL syncs are always checked by logprob parity (vLLM's transfer engine reports no digest).
            assert metrics["weight_sync/max_logprob_diff"] <= 0.5
            assert metrics["weight_sync/bytes"] == pytest.approx(2 * n_params, rel=0.01)  # bf16 on the wire
            assert metrics["weight_sync/gbps"] > 0

            after = engine.generate(PROMPTS, greedy)
            assert {c.version for c in after} == {version}
            tokens_changed = [c.token_ids for c in after] != [c.token_ids for c in before]
            pairs = zip(after, before, strict=True)
            logprobs_moved = max(abs(a - b) for x, y in pairs for a, b in zip(x.logprobs, y.logprobs, strict=True))
            print(f"NCCL_SYNC v{version} tokens_changed={tokens_changed} max_logprob_move={logprobs_moved:.4g}")
            results[f"v{version}_tokens_changed"] = tokens_changed
            assert tokens_changed or logprobs_moved > 1e-3, "the engine's generations did not change after the sync"
            before = after

        engine.close()
        closed = True
        assert not ray.is_initialized()
        survivors = _wait_for_no_children(baseline)
        results["survivors"] = survivors
        results["gpu1_processes_after_close"] = _gpu_processes(1)
        print(f"NCCL_SYNC closed: survivors={survivors} gpu1_processes={results['gpu1_processes_after_close']}")
        assert not survivors, f"processes left after close(): {survivors}"
    finally:
        if not closed:
            engine.close()
        out = os.environ.get("LRL_GPU_SYNC_RESULTS")
        if out:
            with open(out, "w") as f:
                json.dump(results, f, indent=1, default=str)
