"""GAE and group-relative advantages: hand-derived values, a loop reference, and the zero-sum invariant."""

import math

import pytest
import torch

from lightning_rl.algorithms import gae, group_advantages

pytestmark = pytest.mark.unit
F64 = torch.float64


def test_gae_three_tokens_by_hand() -> None:
    # gamma = 0.9, lam = 0.8, so gamma * lam = 0.72; V after the last token is 0 (terminal).
    # Row 0: r = [0, 0, 1], V = [0.5, 0.6, 0.7], all trained.
    #   t=2: delta = 1 + 0.9*0   - 0.7 = 0.3    A2 = 0.3
    #   t=1: delta = 0 + 0.9*0.7 - 0.6 = 0.03   A1 = 0.03 + 0.72*0.3   = 0.246
    #   t=0: delta = 0 + 0.9*0.6 - 0.5 = 0.04   A0 = 0.04 + 0.72*0.246 = 0.21712
    #   returns = A + V = [0.71712, 0.846, 1.0]
    # Row 1: r = [0, 2, 99], V = [1.0, 0.5, 7.0], mask [1, 1, 0] (the padding's reward/value must not leak in).
    #   t=1: delta = 2 - 0.5 = 1.5                      A1 = 1.5
    #   t=0: delta = 0 + 0.9*0.5 - 1.0 = -0.55          A0 = -0.55 + 0.72*1.5 = 0.53
    #   returns = [1.53, 2.0, 0]
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 99.0]], dtype=F64)
    values = torch.tensor([[0.5, 0.6, 0.7], [1.0, 0.5, 7.0]], dtype=F64)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(advantages, torch.tensor([[0.21712, 0.246, 0.3], [0.53, 1.5, 0.0]], dtype=F64))
    torch.testing.assert_close(returns, torch.tensor([[0.71712, 0.846, 1.0], [1.53, 2.0, 0.0]], dtype=F64))


def test_gae_skips_masked_holes() -> None:
    # mask [1, 0, 1]: position 1 is skipped, so token 0's successor is token 2.
    #   t=2: A2 = 1 - 0.7 = 0.3
    #   t=0: delta = 0 + 0.9*0.7 - 0.5 = 0.13   A0 = 0.13 + 0.72*0.3 = 0.346
    rewards = torch.tensor([[0.0, 5.0, 1.0]], dtype=F64)
    values = torch.tensor([[0.5, 9.0, 0.7]], dtype=F64)
    mask = torch.tensor([[True, False, True]])
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(advantages, torch.tensor([[0.346, 0.0, 0.3]], dtype=F64))
    torch.testing.assert_close(returns, torch.tensor([[0.846, 0.0, 1.0]], dtype=F64))


def test_gae_gamma_lam_one_is_monte_carlo() -> None:
    # gamma = lam = 1 telescopes: A_t = sum_{k>=t} r_k - V_t, so returns are the reward-to-go.
    torch.manual_seed(0)
    rewards = torch.randn(4, 6, dtype=F64)
    values = torch.randn(4, 6, dtype=F64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    advantages, returns = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    to_go = rewards.flip(-1).cumsum(-1).flip(-1)
    torch.testing.assert_close(returns, to_go, atol=1e-12, rtol=0)
    torch.testing.assert_close(advantages, to_go - values, atol=1e-12, rtol=0)


def _gae_loop(rewards: list[float], values: list[float], mask: list[bool], gamma: float, lam: float) -> list[float]:
    out = [0.0] * len(rewards)
    next_value, next_adv = 0.0, 0.0
    for t in range(len(rewards) - 1, -1, -1):
        if not mask[t]:
            continue
        delta = rewards[t] + gamma * next_value - values[t]
        out[t] = delta + gamma * lam * next_adv
        next_value, next_adv = values[t], out[t]
    return out


def test_gae_matches_python_loop_on_random_masks() -> None:
    torch.manual_seed(1)
    rewards = torch.randn(5, 7, dtype=F64)
    values = torch.randn(5, 7, dtype=F64, requires_grad=True)
    mask = torch.rand(5, 7) > 0.3
    advantages, returns = gae(rewards, values, mask, gamma=0.97, lam=0.9)
    assert not advantages.requires_grad and not returns.requires_grad
    for b in range(5):
        expected = _gae_loop(rewards[b].tolist(), values[b].tolist(), mask[b].tolist(), 0.97, 0.9)
        torch.testing.assert_close(advantages[b], torch.tensor(expected, dtype=F64), atol=1e-12, rtol=0)
    torch.testing.assert_close(returns, torch.where(mask, advantages + values.detach(), 0.0), atol=1e-12, rtol=0)


def test_gae_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="gae expects"):
        gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3, dtype=torch.bool), 1.0, 1.0)


def test_group_advantages_by_hand() -> None:
    # Groups need not be contiguous: id 3 = {0, 1, 3, 5}, id 7 = {2, 4}, id 9 = {6}.
    # Group 3 rewards [1, 0, 0, 1]: mean 0.5, Bessel std = sqrt(4 * 0.25 / 3) = sqrt(1/3),
    # so A = +-0.5 / (sqrt(1/3) + eps).
    # Group 7 rewards [2, 2]: tied, A = 0 / (0 + eps) = 0. Group 9 is a singleton: no baseline, A = 0.
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.0, 2.0, 1.0, 5.0], dtype=F64)
    group_ids = torch.tensor([3, 3, 7, 3, 7, 3, 9])
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    expected = torch.tensor([a, -a, 0.0, -a, 0.0, a, 0.0], dtype=F64)
    torch.testing.assert_close(group_advantages(rewards, group_ids), expected, atol=1e-12, rtol=0)
    # Dr-GRPO (unbiased=True): mean-centred only.
    expected_unbiased = torch.tensor([0.5, -0.5, 0.0, -0.5, 0.0, 0.5, 0.0], dtype=F64)
    torch.testing.assert_close(group_advantages(rewards, group_ids, unbiased=True), expected_unbiased)


def test_group_advantages_two_member_group_uses_sample_std() -> None:
    # {0, 1}: mean 0.5, sample std sqrt(0.5) -> A = +-0.5 / sqrt(0.5) = +-0.70710678 (eps = 0 to compare exactly).
    adv = group_advantages(torch.tensor([0.0, 1.0], dtype=F64), torch.tensor([0, 0]), eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([-math.sqrt(0.5), math.sqrt(0.5)], dtype=F64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("unbiased", [False, True])
def test_group_advantages_sum_to_zero_within_each_group(unbiased: bool) -> None:
    torch.manual_seed(2)
    group_ids = torch.randint(0, 6, (64,))
    rewards = torch.randn(64, dtype=F64)
    adv = group_advantages(rewards, group_ids, unbiased=unbiased)
    for g in group_ids.unique():
        assert abs(float(adv[group_ids == g].sum())) < 1e-9


def test_group_advantages_accepts_integer_rewards() -> None:
    adv = group_advantages(torch.tensor([1, 0, 1, 1]), torch.tensor([0, 0, 1, 1]), unbiased=True)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]))
