"""PPOConfig's refusals, PPO.plan's batch arithmetic, and the exactness of ``OnPolicyMethod.chunks`` (micro-batches)."""

from __future__ import annotations

import pytest
import torch

from lightning_rl.algorithms import LOSS_TYPES, aggregate_loss, clipped_policy_loss
from lightning_rl.errors import ConfigError
from lightning_rl.methods.ppo import PPO, PPOConfig
from lightning_rl.roles import CriticModule, PolicyModule
from lightning_rl.types import Trajectory

MAX_TOKENS = 4


def make_ppo(model_path: str, **ppo_kwargs) -> PPO:
    """A PPO module without a Trainer (nothing is built: ``plan`` and ``chunks`` only read the config)."""
    ppo_kwargs.setdefault("kl_penalty", "none")
    return PPO(policy=PolicyModule(model_path), critic=CriticModule(model_path), ppo=PPOConfig(**ppo_kwargs))


def ppo_chunks(ppo: PPO, mb: Trajectory) -> list[tuple[Trajectory, float]]:
    """The micro-batches PPO's critic and policy steps accumulate over, called as they call it."""
    return list(ppo.chunks(mb, ppo.ppo.micro_batch_size, ppo.ppo.loss_type))


# ----- PPOConfig refusals ---------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_mini_batch_must_divide_batch_and_names_both_keys() -> None:
    with pytest.raises(ConfigError) as info:
        PPOConfig(batch_size=10, mini_batch_size=4)
    message = str(info.value)
    assert "model.ppo.mini_batch_size=4" in message and "model.ppo.batch_size=10" in message
    assert "does not divide" in message
    PPOConfig(batch_size=12, mini_batch_size=4)  # divides: accepted


@pytest.mark.unit
@pytest.mark.parametrize("epochs", [0, -1])
def test_epochs_must_be_positive(epochs: int) -> None:
    with pytest.raises(ConfigError, match=rf"model\.ppo\.epochs must be >= 1, got {epochs}"):
        PPOConfig(epochs=epochs)


@pytest.mark.unit
def test_k3_in_the_reward_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"kl_estimator=k3 belongs in the loss: set model\.ppo\.kl_penalty=loss"):
        PPOConfig(kl_penalty="reward", kl_estimator="k3")
    assert PPOConfig(kl_penalty="loss", kl_estimator="k3").estimator == "k3"
    assert PPOConfig(kl_penalty="loss").estimator == "k3"
    assert PPOConfig(kl_penalty="reward").estimator == "k1"


@pytest.mark.unit
@pytest.mark.parametrize("kl_penalty", ["reward", "none"])
def test_kl_coeff_clamp_needs_loss_kl(kl_penalty: str) -> None:
    with pytest.raises(ConfigError, match=r"kl_coeff_clamp needs model\.ppo\.kl_penalty=loss"):
        PPOConfig(kl_penalty=kl_penalty, kl_coeff_clamp=5.0)
    assert PPOConfig(kl_penalty="loss", kl_coeff_clamp=5.0).kl_coeff_clamp == 5.0


@pytest.mark.unit
def test_bad_loss_type_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"model\.ppo\.loss_type must be one of token-mean, .*; got 'seq-mean'"):
        PPOConfig(loss_type="seq-mean")


@pytest.mark.unit
@pytest.mark.parametrize("ratio", [0.5, 1.0, -2.0])
def test_dual_clip_bound_must_exceed_one(ratio: float) -> None:
    with pytest.raises(ConfigError, match=rf"lower_bound_ratio must be 0 \(off\) or > 1, got {ratio}"):
        PPOConfig(lower_bound_ratio=ratio)
    assert PPOConfig(lower_bound_ratio=3.0).lower_bound_ratio == 3.0


# ----- PPO.plan -------------------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_plan_refuses_a_batch_not_divisible_by_the_processes(tiny_model_dir) -> None:
    ppo = make_ppo(str(tiny_model_dir), batch_size=6)
    with pytest.raises(ConfigError, match=r"model\.ppo\.batch_size=6 is not divisible by the 4 processes"):
        ppo.plan(4)
    # The minibatch is checked too: 8 prompts split 2 per process, but a minibatch of 2 cannot span 4 processes.
    with pytest.raises(ConfigError, match=r"model\.ppo\.mini_batch_size=2 is not divisible by the 4 processes"):
        make_ppo(str(tiny_model_dir), batch_size=8, mini_batch_size=2).plan(4)
    # And the micro-batch must divide each process's share of a minibatch (8 / 2 processes = 4).
    with pytest.raises(ConfigError, match=r"micro_batch_size=3 does not divide the per-process minibatch \(4 = "):
        make_ppo(str(tiny_model_dir), batch_size=8, micro_batch_size=3).plan(2)


@pytest.mark.unit
def test_plan_reports_epochs_times_minibatches_optimizer_steps(tiny_model_dir) -> None:
    ppo = make_ppo(str(tiny_model_dir), batch_size=16, mini_batch_size=4, micro_batch_size=1, epochs=3)
    plan = ppo.plan(2)
    # 3 epochs x (16 / 4) minibatches = 12 optimizer steps per role per iteration.
    assert plan.lines["optimizer steps per iteration"] == "policy 12, critic 12"
    assert ppo.optimizer_steps_per_iteration() == 12
    assert plan.lines["minibatches per epoch"] == 4
    assert plan.lines["sequences per minibatch"] == "4 (2 per process)"
    assert plan.lines["prompts per process"] == 8
    assert plan.lines["micro-batch per forward"] == 1
    assert "optimizer steps per iteration" in plan.render()
    # mini_batch_size 0 = the whole batch: one step per epoch.
    assert make_ppo(str(tiny_model_dir), batch_size=8, epochs=2).plan(1).lines["optimizer steps per iteration"] == (
        "policy 2, critic 2"
    )


# ----- micro-batch chunks ---------------------------------------------------------------------------------------------
# Response lengths: one chunk of micro_batch_size 2 (rows 2, 3) is entirely empty and the last chunk is ragged (row 6).
LENGTHS = [3, 1, 0, 0, 4, 2, 4]


def synthetic_traj() -> Trajectory:
    b = len(LENGTHS)
    mask = torch.arange(MAX_TOKENS)[None, :] < torch.tensor(LENGTHS)[:, None]
    return Trajectory(
        prompt_ids=torch.ones((b, 2), dtype=torch.long),
        prompt_mask=torch.ones((b, 2), dtype=torch.bool),
        response_ids=torch.ones((b, MAX_TOKENS), dtype=torch.long),
        response_mask=mask,
        group_ids=torch.arange(b),  # the row index, to find each chunk's rows of the loss matrix
        batch_size=[b],
    )


@pytest.mark.unit
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_chunks_sum_to_the_minibatch_loss_and_gradient(tiny_model_dir, loss_type: str) -> None:
    ppo = make_ppo(str(tiny_model_dir), batch_size=7, micro_batch_size=2, loss_type=loss_type)
    traj = synthetic_traj()
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(traj.response_mask.shape, generator=gen, dtype=torch.float64, requires_grad=True)
    target = torch.randn(traj.response_mask.shape, generator=gen, dtype=torch.float64)

    def loss_mat(rows: torch.Tensor) -> torch.Tensor:
        return (theta[rows] - target[rows]) ** 2 * torch.sigmoid(theta[rows])  # any nonlinear per-token loss

    mask = traj.response_mask
    whole = aggregate_loss(loss_mat(traj.group_ids), mask, loss_type, MAX_TOKENS)
    (whole_grad,) = torch.autograd.grad(whole, theta)

    chunks = ppo_chunks(ppo, traj)
    rows_seen = torch.cat([chunk.group_ids for chunk, _ in chunks])
    # Consecutive slices of at most 2 rows; the all-empty chunk (rows 2, 3) still runs (FSDP2 needs every rank to run
    # the same forwards) but carries share 0.
    assert rows_seen.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert [share for chunk, share in chunks if chunk.group_ids.tolist() == [2, 3]] == [0.0]
    assert all(chunk.batch_size[0] <= 2 for chunk, _ in chunks)
    assert sum(share for _, share in chunks) == pytest.approx(1.0, abs=1e-12)
    chunked = sum(
        aggregate_loss(loss_mat(chunk.group_ids), chunk.response_mask, loss_type, MAX_TOKENS) * share
        for chunk, share in chunks
    )
    (chunked_grad,) = torch.autograd.grad(chunked, theta)
    torch.testing.assert_close(chunked, whole, atol=1e-12, rtol=0)
    torch.testing.assert_close(chunked_grad, whole_grad, atol=1e-12, rtol=0)
    assert whole_grad[mask].abs().min() > 0  # every trained token carries gradient, so the comparison is not vacuous


@pytest.mark.unit
def test_chunks_whole_minibatch_when_micro_batch_is_zero_or_large(tiny_model_dir) -> None:
    traj = synthetic_traj()
    for micro in (0, 7, 10):
        (only,) = ppo_chunks(make_ppo(str(tiny_model_dir), batch_size=7, micro_batch_size=micro), traj)
        assert only[0] is traj and only[1] == 1.0


@pytest.mark.integration
@pytest.mark.parametrize("loss_type", ["token-mean", "seq-mean-token-mean"])  # token- and sequence-count divisors
def test_chunked_policy_loss_matches_the_minibatch_on_the_tiny_model(tiny_model_dir, loss_type: str) -> None:
    ppo = make_ppo(str(tiny_model_dir), batch_size=5, micro_batch_size=2, loss_type=loss_type)
    ppo.policy.build()
    model = ppo.policy.model
    gen = torch.Generator().manual_seed(1)
    lengths = torch.tensor([3, 1, 4, 2, 4])
    b = len(lengths)
    traj = Trajectory(
        prompt_ids=torch.randint(6, 100, (b, 3), generator=gen),
        prompt_mask=torch.ones((b, 3), dtype=torch.bool),
        response_ids=torch.randint(6, 100, (b, MAX_TOKENS), generator=gen),
        response_mask=torch.arange(MAX_TOKENS)[None, :] < lengths[:, None],
        batch_size=[b],
    )
    with torch.no_grad():
        # Old logprobs off by up to +-0.3 nats, so some ratios clip and some do not.
        noise = 0.3 * (2 * torch.rand((b, MAX_TOKENS), generator=gen) - 1)
        traj.old_logprobs = ppo.policy.forward_logprobs(traj)[0] + noise
    traj.advantages = torch.randn((b, MAX_TOKENS), generator=gen)

    def loss_of(t: Trajectory) -> torch.Tensor:
        logp = ppo.policy.forward_logprobs(t)[0]
        kwargs = dict(loss_type=loss_type, max_tokens=MAX_TOKENS)
        return clipped_policy_loss(logp, t.old_logprobs, t.advantages, t.response_mask, **kwargs)[0]

    whole = loss_of(traj)
    whole.backward()
    whole_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    chunked = 0.0
    for chunk, share in ppo_chunks(ppo, traj):
        loss = loss_of(chunk) * share
        loss.backward()  # accumulate, as policy_step does
        chunked += float(loss.detach())
    assert chunked == pytest.approx(float(whole.detach()), abs=1e-6)
    for p, g in zip(model.parameters(), whole_grads, strict=True):
        torch.testing.assert_close(p.grad, g, atol=1e-6, rtol=1e-4)
    model.zero_grad(set_to_none=True)
