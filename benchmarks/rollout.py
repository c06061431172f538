"""Rollout throughput: the framework's ``vllm_ray`` rollout against a bare ``vllm.LLM.generate``, same prompts/sampling.

    .venv/bin/python benchmarks/rollout.py                  # tiny model, 1 replica x 1 thread vs bare on 1 thread
    .venv/bin/python benchmarks/rollout.py --bare-stock     # bare = vLLM's stock layout (engine core in a subprocess)
    .venv/bin/python benchmarks/rollout.py --replicas 2 --threads 1 --bare-threads 2

By default the bare engine runs as the framework's CPU actors run theirs (engine core and worker in one process,
``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the ratio measures what the framework adds (Ray, splitting, completion
records), not the engine layout. ``--bare-stock`` compares with vLLM's default layout instead, whose inter-process hop
costs the bare side throughput on a small model.

Both sides sample with ``ignore_eos`` and a fixed ``max_tokens``, so they generate the same number of tokens, and both
ask for the sampled tokens' logprobs (the framework always does). The engines run one after the other (never at once),
each timed over ``--repeats`` calls after a warm-up call; the best call counts. The framework side also times weight
syncs of the same model into its engines. Last line:

    ratio=<framework tok/s / bare tok/s> framework_tok_s=<f> bare_tok_s=<f> sync_s=<f> sync_gbps=<f>
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def make_prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (count, length), generator=gen).tolist()


def time_calls(fn, repeats: int) -> tuple[float, int]:
    """(best seconds, tokens of one call) after one warm-up call."""
    fn()
    best, tokens = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = fn()
        best = min(best, time.perf_counter() - start)
    return best, tokens


def bench_framework(args, model_dir: str, prompts: list[list[int]]) -> tuple[float, float, float]:
    import torch
    from transformers import AutoModelForCausalLM

    from lightning_rl.rollout.base import RolloutConfig, Sampling
    from lightning_rl.rollout.build import build_engine
    from lightning_rl.weight_sync import sync

    config = RolloutConfig(
        backend="vllm_ray",
        replicas=args.replicas,
        cpu_threads=args.threads,
        dtype="float32",
        kv_cache_memory_bytes=args.kv_cache_mib << 20,
        seed=0,
    )
    sampling = Sampling(temperature=1.0, max_tokens=args.max_tokens, n=args.n, ignore_eos=True)
    engine = build_engine(config, model_dir)
    try:
        seconds, tokens = time_calls(
            lambda: sum(len(c.token_ids) for c in engine.generate(prompts, sampling)), args.repeats
        )
        policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        sync(policy, engine, 1)  # the first sync also checks logprob parity; time the steady-state ones
        syncs = [sync(policy, engine, v) for v in range(2, 2 + args.repeats)]
        sync_s = statistics.median(m["weight_sync/seconds"] for m in syncs)
        sync_gbps = statistics.median(m["weight_sync/gbps"] for m in syncs)
    finally:
        engine.close()
    return tokens / seconds, sync_s, sync_gbps


def bench_bare(args, model_dir: str, prompts: list[list[int]]) -> float:
    if not args.bare_stock:  # the engine layout of the framework's CPU actors: engine core and worker in this process
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ["OMP_NUM_THREADS"] = str(args.bare_threads or os.cpu_count())
        import torch

        torch.set_num_threads(args.bare_threads or os.cpu_count() or 1)
    elif args.bare_threads:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0" if args.bare_threads == 1 else f"0-{args.bare_threads - 1}"
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model_dir, dtype="float32", enforce_eager=True, kv_cache_memory_bytes=args.kv_cache_mib << 20, seed=0)
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=args.max_tokens, ignore_eos=True, logprobs=0)
    requests = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    try:
        seconds, tokens = time_calls(
            lambda: sum(len(c.token_ids) for o in llm.generate(requests, params, use_tqdm=False) for c in o.outputs),
            args.repeats,
        )
    finally:
        llm.llm_engine.engine_core.shutdown()
    return tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--n", type=int, default=4, help="completions per prompt")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per framework replica")
    parser.add_argument("--bare-threads", type=int, default=1, help="CPU threads of the bare engine (0: vLLM's auto)")
    parser.add_argument(
        "--bare-stock",
        action="store_true",
        help="run the bare engine in vLLM's default layout (engine core in a subprocess) instead of in-process",
    )
    parser.add_argument("--kv-cache-mib", type=int, default=256)
    parser.add_argument("--model-dir", default=None, help="an HF model directory (default: build the tiny model)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            from lightning_rl.models.tiny import save_tiny_model

            model_dir = str(save_tiny_model(tmp))
        from transformers import AutoConfig

        prompts = make_prompts(args.prompts, args.prompt_len, int(AutoConfig.from_pretrained(model_dir).vocab_size))
        framework, sync_s, sync_gbps = bench_framework(args, model_dir, prompts)
        bare = bench_bare(args, model_dir, prompts)
    print(
        f"ratio={framework / bare:.3f} framework_tok_s={framework:.1f} bare_tok_s={bare:.1f} "
        f"sync_s={sync_s:.4f} sync_gbps={sync_gbps:.4f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
