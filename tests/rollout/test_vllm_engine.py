"""The in-process ``vllm`` backend on the real vLLM CPU engine, with weight sync into it.

One engine is started for the whole module (about 15-30 s on 2 cores), with ``load_format=dummy`` so the refusal before
the first sync is tested on the same engine; the tests are written to run in file order, and the last one closes it.
"""

from __future__ import annotations

import pytest
import torch
from rollout_testutil import hf_completion_logprobs, one_training_step, wait_for_no_children

from lightning_rl.rollout.base import RolloutConfig, RolloutNotReadyError, Sampling, StaleRolloutError, check_fresh
from lightning_rl.weight_sync import WeightSyncError, check_parity, sync

pytestmark = pytest.mark.vllm

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [20, 21, 22], [40, 41, 42, 43, 44]]
KV_BYTES = 64 << 20


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def engine_and_baseline(tiny_model_dir):
    import psutil

    from lightning_rl.rollout.vllm import VLLMEngine

    baseline = {p.pid for p in psutil.Process().children(recursive=True)}
    config = RolloutConfig(backend="vllm", load_format="dummy", dtype="float32", kv_cache_memory_bytes=KV_BYTES, seed=0)
    engine = VLLMEngine(config, str(tiny_model_dir))
    yield engine, baseline
    engine.close()


@pytest.fixture
def engine(engine_and_baseline, hf_model):
    engine = engine_and_baseline[0]
    if engine.host is None:
        pytest.skip("the module's engine was closed by the lifecycle test")
    if not engine.ready:  # a test selected alone: give the engine real weights first
        sync(hf_model, engine, engine.version)
    return engine


def test_dummy_engine_refuses_to_generate_until_the_first_sync(engine_and_baseline, hf_model):
    engine = engine_and_baseline[0]
    if engine.ready:
        pytest.skip("the engine was already synced by an earlier test")
    with pytest.raises(RolloutNotReadyError, match="load_format=dummy"):
        engine.generate(PROMPTS, Sampling(max_tokens=4))
    metrics = sync(hf_model, engine, 0)
    assert engine.ready and engine.version == 0
    # The first sync of an engine checks logprob parity on the probe prompts.
    assert metrics["weight_sync/max_logprob_diff"] <= 1e-4
    assert metrics["weight_sync/bytes"] > 0 and metrics["weight_sync/seconds"] > 0
    assert metrics["weight_sync/gbps"] == pytest.approx(
        metrics["weight_sync/bytes"] / metrics["weight_sync/seconds"] / 1e9
    )


def test_generate_shapes_order_and_stamps(engine):
    n = 3
    completions = engine.generate(PROMPTS, Sampling(temperature=1.0, max_tokens=6, n=n))
    assert len(completions) == len(PROMPTS) * n
    assert [c.prompt_index for c in completions] == [i for i in range(len(PROMPTS)) for _ in range(n)]
    for c in completions:
        assert c.prompt_token_ids == PROMPTS[c.prompt_index]
        assert 0 < len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
        assert c.finish_reason in ("stop", "length")
        assert c.finish_reason == "stop" or len(c.token_ids) == 6
        assert all(lp <= 0 for lp in c.logprobs)
        assert c.version == engine.version


def test_stop_strings_finish_with_stop(engine):
    stop = tuple("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    completions = engine.generate(PROMPTS, Sampling(max_tokens=32, n=4, stop=stop))
    stopped = [c for c in completions if c.finish_reason == "stop"]
    assert stopped, "a random tiny model emits an alphanumeric character within 32 tokens"
    for c in stopped:
        assert not any(s in c.text for s in stop)


def test_sampled_logprobs_match_the_hf_policy(engine, hf_model):
    completions = engine.generate(PROMPTS, Sampling(temperature=1.0, top_k=5, max_tokens=8, n=2))
    worst = 0.0
    for c in completions:
        expected = hf_completion_logprobs(hf_model, c.prompt_token_ids, c.token_ids)
        worst = max(worst, max(abs(a - b) for a, b in zip(c.logprobs, expected, strict=True)))
    assert worst <= 1e-4, f"raw logprobs differ from HF log_softmax by {worst}"


def test_sync_after_a_training_step_changes_generations_and_verifies(engine, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    sync(policy, engine, engine.version)  # start from the checkpoint (the module's model may have been replaced)
    greedy = Sampling(temperature=0.0, max_tokens=12, ignore_eos=True)
    before = [c.token_ids for c in engine.generate(PROMPTS, greedy)]

    one_training_step(policy)
    version = engine.version + 1
    metrics = sync(policy, engine, version, bucket_bytes=256 << 10, verify="parity")
    assert metrics["weight_sync/max_logprob_diff"] <= 1e-4
    after = engine.generate(PROMPTS, greedy)
    assert [c.token_ids for c in after] != before
    assert {c.version for c in after} == {version}
    check_fresh(after, version)
    with pytest.raises(StaleRolloutError, match="policy_version"):
        check_fresh(after, version + 1)
    for c in after:  # greedy tokens now follow the updated policy
        expected = hf_completion_logprobs(policy, c.prompt_token_ids, c.token_ids)
        assert max(abs(a - b) for a, b in zip(c.logprobs, expected, strict=True)) <= 1e-4

    # Later syncs verify the checksum only.
    one_training_step(policy, seed=1)
    metrics = sync(policy, engine, version + 1)
    assert "weight_sync/max_logprob_diff" not in metrics and metrics["weight_sync/verify_seconds"] >= 0
    assert check_parity(policy, engine) <= 1e-4


def test_parity_check_fails_when_the_engine_runs_other_weights(engine, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    sync(policy, engine, engine.version, verify=False)
    one_training_step(policy, seed=2)  # the trainer moves on without publishing
    with pytest.raises(WeightSyncError, match="replica 0 disagrees"):
        check_parity(policy, engine)


def test_colocated_offload_cycle_is_a_noop_on_cpu(engine, caplog):
    with caplog.at_level("INFO", logger="lightning_rl.rollout.vllm"):
        engine.sleep()
        engine.sleep()
        engine.wake_up()
    assert sum("no sleep mode" in r.message for r in caplog.records) <= 1
    assert len(engine.generate(PROMPTS[:1], Sampling(max_tokens=2))) == 1


def test_close_leaves_no_engine_process(engine_and_baseline):
    engine, baseline = engine_and_baseline
    try:
        engine.generate(PROMPTS, Sampling(max_tokens=2, logprobs_mode="processed"))  # a failing call, then close
    except ValueError as err:
        assert "logprobs_mode" in str(err)
    engine.close()
    engine.close()  # idempotent
    survivors = wait_for_no_children(baseline)
    assert not survivors, f"processes left after close(): {survivors}"
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate(PROMPTS, Sampling(max_tokens=2))
