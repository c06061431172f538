"""The ``vllm_ray`` backend: two real vLLM CPU engines as actors of a real local Ray cluster, started once per module.

The engine starts Ray itself (as ``fit`` does), so its ``close()`` must also stop Ray; the last test checks that nothing
survives it.
"""

from __future__ import annotations

import pytest
import torch
from rollout_testutil import hf_completion_logprobs, one_training_step, wait_for_no_children

from lightning_rl.rollout.base import RolloutConfig, Sampling
from lightning_rl.weight_sync import WeightSyncError, sync

pytestmark = [pytest.mark.ray, pytest.mark.vllm]

PROMPTS = [[5, 6, 7, 8], [20, 21, 22], [40, 41, 42, 43, 44], [60, 61], [70, 71, 72]]


@pytest.fixture(scope="module")
def ray_engine_and_baseline(tiny_model_dir):
    import psutil
    import ray

    from lightning_rl.rollout.ray import RayVLLMEngine

    assert not ray.is_initialized()
    baseline = {p.pid for p in psutil.Process().children(recursive=True)}
    config = RolloutConfig(
        backend="vllm_ray", replicas=2, cpu_threads=1, dtype="float32", kv_cache_memory_bytes=64 << 20, seed=0
    )
    engine = RayVLLMEngine(config, str(tiny_model_dir))
    yield engine, baseline
    engine.close()


@pytest.fixture
def ray_engine(ray_engine_and_baseline):
    engine = ray_engine_and_baseline[0]
    if not engine.actors:
        pytest.skip("the module's engines were closed by the lifecycle test")
    return engine


def test_generation_is_split_across_replicas_in_prompt_major_order(ray_engine, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    hf_model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    n = 2
    completions = ray_engine.generate(PROMPTS, Sampling(temperature=1.0, max_tokens=6, n=n))
    assert [c.prompt_index for c in completions] == [i for i in range(len(PROMPTS)) for _ in range(n)]
    worst = 0.0
    for c in completions:
        assert c.prompt_token_ids == PROMPTS[c.prompt_index] and c.version == ray_engine.version
        assert c.finish_reason in ("stop", "length") and len(c.logprobs) == len(c.token_ids)
        expected = hf_completion_logprobs(hf_model, c.prompt_token_ids, c.token_ids)
        worst = max(worst, max(abs(a - b) for a, b in zip(c.logprobs, expected, strict=True)))
    assert worst <= 1e-4


def test_both_replicas_receive_and_verify_the_weights(ray_engine, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    greedy = Sampling(temperature=0.0, max_tokens=10, ignore_eos=True)
    # Every prompt twice: the first copy lands on replica 0, the second on replica 1.
    prompts = PROMPTS[:2] * 2
    before = [c.token_ids for c in ray_engine.generate(prompts, greedy)]
    assert before[:2] == before[2:]

    one_training_step(policy)
    metrics = sync(policy, ray_engine, 1, bucket_bytes=128 << 10)
    assert metrics["weight_sync/max_logprob_diff"] <= 1e-4  # both replicas checked, the worst reported
    assert metrics["weight_sync/bytes"] > 0 and metrics["weight_sync/gbps"] > 0
    per_replica = ray_engine.probe_logprobs([PROMPTS[0]])
    assert len(per_replica) == 2 and per_replica[0][0] == pytest.approx(per_replica[1][0], abs=1e-6)

    after = ray_engine.generate(prompts, greedy)
    assert [c.token_ids for c in after] != before
    assert [c.token_ids for c in after[:2]] == [c.token_ids for c in after[2:]]
    assert {c.version for c in after} == {1}

    one_training_step(policy, seed=1)
    metrics = sync(policy, ray_engine, 2)  # checksum only
    assert "weight_sync/max_logprob_diff" not in metrics and ray_engine.version == 2


def test_a_replica_that_loads_other_bytes_is_named(ray_engine, tiny_model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    real_finish = type(ray_engine).finish_weight_update

    def tampered(self, version):
        reports = real_finish(self, version)
        reports[1][0]["digest"] = "0" * 32
        return reports

    monkeypatch.setattr(type(ray_engine), "finish_weight_update", tampered)
    with pytest.raises(WeightSyncError, match="replica 1"):
        sync(policy, ray_engine, ray_engine.version + 1, verify="checksum")


def test_close_stops_engines_and_ray(ray_engine_and_baseline):
    import ray

    engine, baseline = ray_engine_and_baseline
    with pytest.raises(Exception, match="logprobs_mode"):  # a failing rollout inside an actor, then teardown
        engine.generate(PROMPTS, Sampling(max_tokens=2, logprobs_mode="processed"))
    engine.close()
    assert not ray.is_initialized()
    survivors = wait_for_no_children(baseline)
    assert not survivors, f"processes left after close(): {survivors}"
