"""Policy / critic / reference roles on the tiny model, and the optimizer schedule every trainable role builds."""

from __future__ import annotations

import pytest
import torch

from lightning_rl.algorithms import clipped_value_loss
from lightning_rl.roles import CriticModule, OptimizerConfig, PolicyModule, ReferenceModule
from lightning_rl.types import Trajectory

PAD = 0
# Prompts of different lengths (left-padded in a batch) and responses of different lengths (right-padded).
PROMPTS = [[4, 20, 21, 22, 23, 24, 25, 5], [4, 30, 31, 5], [4, 40, 41, 42, 43, 5]]
RESPONSES = [[50, 51, 52], [60, 61, 62, 63, 64], [70]]


def make_traj(prompts: list[list[int]], responses: list[list[int]]) -> Trajectory:
    """Left-pad the prompts and right-pad the responses with PAD, independently of ``build_trajectory``."""
    b, p, t = len(prompts), max(map(len, prompts)), max(map(len, responses))
    prompt_ids = torch.full((b, p), PAD)
    prompt_mask = torch.zeros((b, p), dtype=torch.bool)
    response_ids = torch.full((b, t), PAD)
    response_mask = torch.zeros((b, t), dtype=torch.bool)
    for i, (pr, r) in enumerate(zip(prompts, responses, strict=True)):
        prompt_ids[i, p - len(pr) :], prompt_mask[i, p - len(pr) :] = torch.tensor(pr), True
        response_ids[i, : len(r)], response_mask[i, : len(r)] = torch.tensor(r), True
    return Trajectory(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        batch_size=[b],
    )


@torch.no_grad()
def manual_logits(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """[T, V] float32 logits that predict each response token: one unpadded forward, position P-1+t predicts token t."""
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0].float()
    return logits[len(prompt) - 1 : len(prompt) + len(response) - 1]


def manual_logprobs(model, prompt: list[int], response: list[int], temperature: float = 1.0) -> torch.Tensor:
    logp = torch.log_softmax(manual_logits(model, prompt, response) / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(response)[:, None])[:, 0]


@pytest.fixture(scope="module")
def policy(tiny_model_dir) -> PolicyModule:
    module = PolicyModule(str(tiny_model_dir))
    module.build()
    return module


@pytest.fixture(scope="module")
def batch() -> Trajectory:
    return make_traj(PROMPTS, RESPONSES)


# ----- policy ---------------------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_policy_build_without_mesh_loads_the_saved_weights(policy, tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = policy.model
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert all(type(p) is torch.nn.Parameter and p.dtype == torch.float32 for p in model.parameters())  # no DTensor
    policy.build()
    assert policy.model is model  # idempotent
    saved = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    live = model.state_dict()
    assert live.keys() == saved.keys()
    assert all(torch.equal(live[k], saved[k]) for k in live)


@pytest.mark.integration
def test_forward_logprobs_matches_unpadded_manual_forward(policy, batch) -> None:
    logp, entropy = policy.forward_logprobs(batch, with_entropy=True)
    assert logp.shape == entropy.shape == batch.response_ids.shape
    assert logp.dtype == torch.float32 and logp.requires_grad
    for i, (prompt, response) in enumerate(zip(PROMPTS, RESPONSES, strict=True)):
        n = len(response)
        # Each row of the left/right-padded batch equals that sequence's own unpadded forward.
        expected = manual_logprobs(policy.model, prompt, response)
        torch.testing.assert_close(logp[i, :n].detach(), expected, atol=1e-5, rtol=0)
        ref = torch.log_softmax(manual_logits(policy.model, prompt, response), dim=-1)
        torch.testing.assert_close(entropy[i, :n].detach(), -(ref.exp() * ref).sum(-1), atol=1e-5, rtol=0)


@pytest.mark.integration
def test_padding_does_not_change_a_sequences_logprobs(policy, batch) -> None:
    with torch.no_grad():
        in_batch = policy.forward_logprobs(batch)[0]
        for i, (prompt, response) in enumerate(zip(PROMPTS, RESPONSES, strict=True)):
            alone = policy.forward_logprobs(make_traj([prompt], [response]))[0]
            assert alone.shape == (1, len(response))
            torch.testing.assert_close(in_batch[i, : len(response)], alone[0], atol=1e-5, rtol=0)


@pytest.mark.integration
def test_temperature_divides_the_logits(policy, batch) -> None:
    with torch.no_grad():
        hot = policy.forward_logprobs(batch, temperature=0.5)[0]
        plain = policy.forward_logprobs(batch)[0]
    for i, (prompt, response) in enumerate(zip(PROMPTS, RESPONSES, strict=True)):
        n = len(response)
        torch.testing.assert_close(hot[i, :n], manual_logprobs(policy.model, prompt, response, 0.5), atol=1e-5, rtol=0)
    # Not vacuous: a sharper softmax moves every logprob of this random model by far more than the tolerance.
    assert ((hot - plain).abs()[batch.response_mask] > 1e-3).all()


@pytest.mark.integration
def test_score_is_gradient_free_and_micro_batch_invariant(policy, batch) -> None:
    whole = policy.score(batch)
    assert not whole.requires_grad
    for size in (1, 2):
        torch.testing.assert_close(policy.score(batch, micro_batch_size=size), whole, atol=1e-6, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(whole, policy.forward_logprobs(batch)[0], atol=0, rtol=0)


@pytest.mark.integration
def test_hf_state_dict_is_the_full_state_without_a_process_group(policy) -> None:
    import torch.distributed as dist

    assert not dist.is_initialized()
    state = policy.hf_state_dict()
    live = policy.model.state_dict()
    assert state.keys() == live.keys()
    assert "lm_head.weight" in state and "model.embed_tokens.weight" in state
    for k, v in state.items():
        assert v.device.type == "cpu" and not v.requires_grad
        assert v.shape == live[k].shape and torch.equal(v, live[k])


# ----- critic ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def critic(tiny_model_dir) -> CriticModule:
    module = CriticModule(str(tiny_model_dir), optimizer=OptimizerConfig(lr=1e-2))
    module.build()
    return module


@pytest.mark.integration
def test_critic_starts_from_the_policy_backbone_with_a_zero_head(critic, policy, batch) -> None:
    backbone, lm = critic.model.model.state_dict(), policy.model.model.state_dict()
    assert backbone.keys() == lm.keys() and all(torch.equal(backbone[k], lm[k]) for k in lm)
    values = critic.forward_values(batch)
    assert values.shape == batch.response_ids.shape
    assert values.dtype == torch.float32
    assert torch.equal(values, torch.zeros_like(values))  # zero head: exactly 0, not merely small
    torch.testing.assert_close(critic.predict(batch, micro_batch_size=2), values, atol=0, rtol=0)


@pytest.mark.integration
def test_critic_values_move_after_one_value_step(critic, batch) -> None:
    opt, sched = critic.build_optimizer(total_steps=10)
    returns = torch.ones(batch.response_ids.shape)
    values = critic.forward_values(batch)
    loss, _ = clipped_value_loss(values, values.detach(), returns, batch.response_mask, clip_range=0.0)
    assert float(loss.detach()) == pytest.approx(0.5)  # 0.5 * (0 - 1)^2 on every trained token
    loss.backward()
    opt.step()
    sched.step()
    with torch.no_grad():
        after = critic.forward_values(batch)
        new_loss, _ = clipped_value_loss(after, after, returns, batch.response_mask, clip_range=0.0)
    assert (after[batch.response_mask] != 0).all()
    assert float(new_loss) < float(loss.detach())  # one Adam step towards the returns
    # The trained head is still padding-invariant: each sequence alone gives its in-batch values.
    for i, (prompt, response) in enumerate(zip(PROMPTS, RESPONSES, strict=True)):
        with torch.no_grad():
            alone = critic.forward_values(make_traj([prompt], [response]))
        torch.testing.assert_close(after[i, : len(response)], alone[0], atol=1e-5, rtol=0)


# ----- reference ------------------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_reference_is_frozen_and_stays_in_eval(tiny_model_dir, policy, batch) -> None:
    reference = ReferenceModule(str(tiny_model_dir))
    reference.build()
    # Lightning puts the method's whole module tree in train mode: a parent's train() must not reach the reference.
    parent = torch.nn.ModuleDict({"reference": reference})
    parent.train()
    reference.train()
    assert not any(m.training for m in reference.modules())
    params = list(reference.parameters())
    assert params and not any(p.requires_grad for p in params)
    scored = reference.score(batch)
    assert not scored.requires_grad
    # Same starting weights as the policy: the same logprobs, micro-batched or not.
    torch.testing.assert_close(scored, policy.score(batch), atol=1e-6, rtol=0)
    torch.testing.assert_close(reference.score(batch, micro_batch_size=1), scored, atol=1e-6, rtol=0)


# ----- optimizer schedule ---------------------------------------------------------------------------------------------
def lr_trace(config: OptimizerConfig, total_steps: int, steps: int) -> list[float]:
    """The learning rate each of ``steps`` optimizer steps runs with."""
    param = torch.nn.Parameter(torch.zeros(1))
    opt, sched = config.build([param], total_steps)
    trace = []
    for _ in range(steps):
        trace.append(opt.param_groups[0]["lr"])
        param.grad = torch.zeros(1)
        opt.step()
        sched.step()
    return trace


@pytest.mark.unit
def test_optimizer_is_adamw_with_the_configured_settings() -> None:
    config = OptimizerConfig(lr=3e-4, weight_decay=0.1, beta1=0.8, beta2=0.95, eps=1e-6)
    opt, _ = config.build([torch.nn.Parameter(torch.zeros(1))], 10)
    assert isinstance(opt, torch.optim.AdamW)
    group = opt.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["betas"], group["eps"]) == (3e-4, 0.1, (0.8, 0.95), 1e-6)


@pytest.mark.unit
def test_warmup_ramps_linearly_to_lr() -> None:
    # warmup 4: step k runs at lr * (k + 1) / 4 until the 4th step reaches lr; constant afterwards.
    trace = lr_trace(OptimizerConfig(lr=0.2, warmup_steps=4), total_steps=10, steps=8)
    assert trace == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.2, 0.2, 0.2, 0.2], abs=1e-12)


@pytest.mark.unit
def test_linear_schedule_ends_at_min_lr_ratio() -> None:
    # No warmup: step k runs at lr * (1 - (1 - 0.1) * k / 10), reaching 0.1 * lr after the run's 10 steps and staying.
    trace = lr_trace(OptimizerConfig(lr=0.2, schedule="linear", min_lr_ratio=0.1), total_steps=10, steps=14)
    assert trace[:11] == pytest.approx([0.2 * (1 - 0.9 * k / 10) for k in range(11)], abs=1e-12)
    assert trace[10:] == pytest.approx([0.02] * 4, abs=1e-12)
    assert all(a > b for a, b in zip(trace[:10], trace[1:11], strict=True))


@pytest.mark.unit
def test_constant_schedule_stays() -> None:
    assert lr_trace(OptimizerConfig(lr=0.2), total_steps=5, steps=12) == [0.2] * 12


@pytest.mark.unit
def test_linear_decay_starts_after_warmup() -> None:
    trace = lr_trace(OptimizerConfig(lr=0.2, warmup_steps=4, schedule="linear", min_lr_ratio=0.1), 10, 11)
    assert trace[:4] == pytest.approx([0.05, 0.1, 0.15, 0.2], abs=1e-12)  # the ramp reaches the peak lr
    assert trace[10] == pytest.approx(0.02, abs=1e-12)  # and the decay still ends at min_lr_ratio x lr
