"""The ``hf`` rollout backend: transformers ``generate`` on the live policy, checked against the policy's scoring."""

from __future__ import annotations

import pytest
import torch

from lightning_rl.methods.trajectory import build_trajectory
from lightning_rl.roles import PolicyModule
from lightning_rl.roles.common import load_tokenizer, response_logits
from lightning_rl.rollout.base import Sampling
from lightning_rl.rollout.hf import HFRolloutEngine

pytestmark = pytest.mark.integration

# Three prompts of different lengths, so generation and scoring both left-pad.
PROMPTS = [[4, 20, 21, 22, 23, 24, 5], [4, 30, 5], [4, 40, 41, 42, 5]]


@pytest.fixture(scope="module")
def policy(tiny_model_dir) -> PolicyModule:
    module = PolicyModule(str(tiny_model_dir))
    module.build()
    return module


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(str(tiny_model_dir))


def boost(policy: PolicyModule, token_id: int, amount: float):
    """Add ``amount`` to one token's logit in every forward of the policy (generation and scoring alike)."""

    def hook(module, args, output):
        output = output.clone()
        output[..., token_id] += amount
        return output

    return policy.model.lm_head.register_forward_hook(hook)


@pytest.fixture
def likely_eos(policy, tokenizer):
    # The random tiny model almost never samples eos; +2.5 nats makes it ~10% per step, so a batch mixes completions
    # that stop early (right padding) with ones that hit max_tokens.
    handle = boost(policy, tokenizer.eos_token_id, 2.5)
    yield
    handle.remove()


def engine_for(policy: PolicyModule, tokenizer, **kwargs) -> HFRolloutEngine:
    return HFRolloutEngine(lambda: policy.model, tokenizer, **kwargs)


def test_n_completions_per_prompt_prompt_major(policy, tokenizer, likely_eos) -> None:
    engine = engine_for(policy, tokenizer)
    engine.update_weights((), version=3)
    policy.model.train()
    completions = engine.generate(PROMPTS, Sampling(max_tokens=6, n=3, seed=0))
    assert policy.model.training  # generate runs in eval and restores the caller's mode
    policy.model.eval()
    assert len(completions) == len(PROMPTS) * 3
    for k, c in enumerate(completions):
        assert c.prompt_index == k // 3
        assert c.prompt_token_ids == PROMPTS[k // 3]
        assert c.version == 3
        assert 0 < len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
        assert c.text == tokenizer.decode(c.token_ids, skip_special_tokens=True)


def test_prompt_index_across_engine_micro_batches(policy, tokenizer) -> None:
    engine = engine_for(policy, tokenizer, micro_batch_size=2)  # chunks of prompts [0, 1] and [2]
    completions = engine.generate(PROMPTS, Sampling(max_tokens=2, n=2, seed=0))
    assert [c.prompt_index for c in completions] == [0, 0, 1, 1, 2, 2]
    assert [c.prompt_token_ids for c in completions] == [p for p in PROMPTS for _ in range(2)]


def test_finish_reason_stop_iff_eos_is_last_else_length(policy, tokenizer, likely_eos) -> None:
    eos, max_tokens = tokenizer.eos_token_id, 6
    completions = engine_for(policy, tokenizer).generate(PROMPTS, Sampling(max_tokens=max_tokens, n=6, seed=0))
    for c in completions:
        assert eos not in c.token_ids[:-1]  # nothing is kept after the eos
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == eos
        else:
            assert c.finish_reason == "length"
            assert len(c.token_ids) == max_tokens and c.token_ids[-1] != eos
    reasons = {c.finish_reason for c in completions}
    assert reasons == {"stop", "length"}  # both branches were exercised
    traj = build_trajectory(completions, tokenizer.pad_token_id)
    assert traj.truncated.tolist() == [c.finish_reason == "length" for c in completions]


@pytest.mark.parametrize(
    ("mode", "score_temperature"),
    [("raw", 1.0), ("processed", 0.7)],  # raw: log_softmax(logits); processed: after the temperature (no top-k/p)
)
def test_rollout_logprobs_equal_the_policys_own_scoring(policy, tokenizer, likely_eos, mode, score_temperature) -> None:
    sampling = Sampling(temperature=0.7, max_tokens=6, n=3, seed=1, logprobs_mode=mode)
    completions = engine_for(policy, tokenizer).generate(PROMPTS, sampling)
    traj = build_trajectory(completions, tokenizer.pad_token_id)
    assert traj.response_mask.sum(-1).unique().numel() > 1  # right padding is exercised
    with torch.no_grad():
        logp = policy.forward_logprobs(traj, temperature=score_temperature)[0]
    mask = traj.response_mask
    torch.testing.assert_close(logp[mask], traj.rollout_logprobs[mask], atol=1e-5, rtol=0)


def test_greedy_is_deterministic_and_picks_the_argmax(policy, tokenizer) -> None:
    engine = engine_for(policy, tokenizer)
    greedy = Sampling(temperature=0.0, max_tokens=5, n=1)
    first = engine.generate(PROMPTS, greedy)
    second = engine.generate(PROMPTS, greedy)
    assert [c.token_ids for c in first] == [c.token_ids for c in second]
    traj = build_trajectory(first, tokenizer.pad_token_id)
    with torch.no_grad():
        argmax = response_logits(policy.model, traj).argmax(-1)
    assert torch.equal(argmax[traj.response_mask], traj.response_ids[traj.response_mask])


def test_fixed_seed_reproduces_a_fresh_engines_completions(policy, tokenizer) -> None:
    sampling = Sampling(max_tokens=6, n=2, seed=7)
    torch.manual_seed(0)
    rng = torch.get_rng_state()
    runs = []
    for _ in range(2):
        engine = engine_for(policy, tokenizer)
        runs.append([[(c.token_ids, c.logprobs) for c in engine.generate(PROMPTS, sampling)] for _ in range(2)])
    assert torch.equal(torch.get_rng_state(), rng)  # seeded sampling leaves the global generator alone
    assert runs[0] == runs[1]  # call k of one fresh engine == call k of another
    other = engine_for(policy, tokenizer).generate(PROMPTS, Sampling(max_tokens=6, n=2, seed=8))
    assert [c.token_ids for c in other] != [tokens for tokens, _ in runs[0][0]]


def test_stop_string_completion_ends_at_the_stop_string(policy, tokenizer) -> None:
    stop = "x"
    handle = boost(policy, tokenizer.convert_tokens_to_ids(stop), 3.0)
    try:
        sampling = Sampling(max_tokens=10, n=4, seed=0, stop=(stop,))
        completions = engine_for(policy, tokenizer).generate(PROMPTS, sampling)
    finally:
        handle.remove()
    assert any(c.finish_reason == "stop" and c.token_ids[-1] != tokenizer.eos_token_id for c in completions)
    for c in completions:
        assert stop not in c.text
        assert len(c.logprobs) == len(c.token_ids)
        # Generation ends with the token that completes the stop string: nothing may follow it.
        assert stop not in tokenizer.decode(c.token_ids[:-1], skip_special_tokens=False)


def test_ignore_eos_samples_max_tokens(policy, tokenizer, likely_eos) -> None:
    completions = engine_for(policy, tokenizer).generate(PROMPTS, Sampling(max_tokens=6, n=4, seed=0, ignore_eos=True))
    assert all(len(c.token_ids) == 6 and c.finish_reason == "length" for c in completions)
