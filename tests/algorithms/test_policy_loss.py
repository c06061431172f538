"""Clipped surrogate (token / GSPO sequence level, dual clip) and legacy_pg: hand values, loop references, gradcheck."""

import math

import pytest
import torch

from lightning_rl.algorithms import (
    LOSS_TYPES,
    clipped_policy_loss,
    legacy_pg_loss,
    sequence_log_ratio,
)

pytestmark = pytest.mark.unit
F64 = torch.float64


def _hand_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # Row 0 ratios [1.5, 0.5, 0.5] with A [1, 1, -1]; row 1 ratios [5, 2, pad] with A [-1, -1, pad].
    old = torch.zeros(2, 3, dtype=F64)
    logp = torch.log(torch.tensor([[1.5, 0.5, 0.5], [5.0, 2.0, 1.0]], dtype=F64)).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, -1.0], [-1.0, -1.0, 7.0]], dtype=F64)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    return logp, old, adv, mask


def test_token_level_clip_and_dual_clip_by_hand() -> None:
    # eps = 0.2 -> clip to [0.8, 1.2]; dual clip c = 3. l = max(-A r, -A clip(r)), then min(l, -A c) for A < 0:
    #   r=1.5, A=+1: max(-1.5, -1.2) = -1.2  clipped        r=0.5, A=+1: max(-0.5, -0.8) = -0.5  unclipped
    #   r=0.5, A=-1: max( 0.5,  0.8) =  0.8  clipped        r=5,   A=-1: max(5, 1.2) = 5 -> min(5, 3) = 3  dual
    #   r=2,   A=-1: max( 2,    1.2) =  2    min(2, 3) = 2 unclipped
    # token-mean = (-1.2 - 0.5 + 0.8 + 3 + 2) / 5 = 0.82; clip_frac = 3/5; dual_clip_frac = 1/5
    # ratio_absdev = (0.5 + 0.5 + 0.5 + 4 + 1) / 5 = 1.3; both rows have a clipped token -> seq_clip_frac = 1
    # Gradient d l / d logp = -A r on unclipped tokens, 0 on clipped ones, / 5 tokens:
    #   row 0 token 1: -1 * 0.5 / 5 = -0.1;  row 1 token 1: +1 * 2 / 5 = 0.4.
    logp, old, adv, mask = _hand_batch()
    loss, stats = clipped_policy_loss(logp, old, adv, mask, lower_bound_ratio=3.0)
    assert float(loss.detach()) == pytest.approx(0.82, abs=1e-12)
    assert float(stats.clip_frac) == pytest.approx(0.6, abs=1e-12)
    assert float(stats.dual_clip_frac) == pytest.approx(0.2, abs=1e-12)
    assert float(stats.ratio_absdev) == pytest.approx(1.3, abs=1e-12)
    assert float(stats.seq_clip_frac) == 1.0 and float(stats.valid_sequence_count) == 2.0
    z0, z1 = (math.log(1.5) + 2 * math.log(0.5)) / 3, math.log(10) / 2
    assert float(stats.seq_log_ratio_abs) == pytest.approx((abs(z0) + abs(z1)) / 2, abs=1e-12)
    kl = [r - 1 - math.log(r) for r in (1.5, 0.5, 0.5, 5.0, 2.0)]
    assert float(stats.approx_kl) == pytest.approx(sum(kl) / 5, abs=1e-12)
    (grad,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(grad, torch.tensor([[0.0, -0.1, 0.0], [0.0, 0.4, 0.0]], dtype=F64))

    # Dual clip off: the r=5 token costs 5 -> (−1.2 − 0.5 + 0.8 + 5 + 2) / 5 = 1.22.
    loss, stats = clipped_policy_loss(logp, old, adv, mask, lower_bound_ratio=0.0)
    assert float(loss.detach()) == pytest.approx(1.22, abs=1e-12) and float(stats.dual_clip_frac) == 0.0
    # epsilon_high < 0 removes the upper bound: the r=1.5, A=+1 token now costs -1.5 -> (1.22*5 - 0.3) / 5 = 1.16.
    loss, _ = clipped_policy_loss(logp, old, adv, mask, epsilon_high=-1.0)
    assert float(loss.detach()) == pytest.approx(1.16, abs=1e-12)


def test_identical_policies_give_unit_ratios() -> None:
    torch.manual_seed(9)
    logp = torch.randn(4, 6, dtype=F64, requires_grad=True)
    adv = torch.randn(4, dtype=F64)
    mask = torch.rand(4, 6) > 0.3
    mask[:, 0] = True
    for level in ("token", "sequence"):
        loss, stats = clipped_policy_loss(logp, logp.detach().clone(), adv, mask, importance_sampling_level=level)
        # ratio == 1 exactly, so the loss is exactly the token mean of -A.
        expected = -(adv[:, None].expand(4, 6) * mask).sum() / mask.sum()
        assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-15)
        assert float(stats.clip_frac) == 0.0 and float(stats.ratio_absdev) == 0.0
        assert float(stats.approx_kl) == 0.0 and float(stats.seq_log_ratio_abs) == 0.0
    log_ratio, z = sequence_log_ratio(logp, logp.detach().clone(), mask)
    assert torch.equal(torch.exp(log_ratio), torch.ones_like(logp)) and torch.equal(z, torch.zeros(4, dtype=F64))


def test_sequence_level_by_hand() -> None:
    # Row 0: log-ratios [ln 2, 0] -> z = ln2 / 2, s = sqrt 2 = 1.414 > 1.2, A = +1 -> l = -1.2 on both tokens (clipped).
    # Row 1: log-ratios [ln 1.1, ln 1.1] -> s = 1.1, A = -1 -> l = max(1.1, 1.1 * 1) = 1.1 (inside the clip).
    # seq-mean-token-mean = (-1.2 + 1.1) / 2 = -0.05. Row 1's gradient per token: -A * s * d(log s_t)/d logp_t = 1.1,
    # weighted 1 / (|y| * S) = 1/4 -> 0.275; row 0 is clipped -> 0.
    logp = torch.log(torch.tensor([[2.0, 1.0], [1.1, 1.1]], dtype=F64)).requires_grad_(True)
    old = torch.zeros(2, 2, dtype=F64)
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    loss, stats = clipped_policy_loss(
        logp, old, adv, mask, importance_sampling_level="sequence", loss_type="seq-mean-token-mean"
    )
    assert float(loss.detach()) == pytest.approx(-0.05, abs=1e-12)
    assert float(stats.clip_frac) == 0.5 and float(stats.seq_clip_frac) == 0.5
    assert float(stats.seq_log_ratio_abs) == pytest.approx((math.log(2) / 2 + math.log(1.1)) / 2, abs=1e-12)
    (grad,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0], [0.275, 0.275]], dtype=F64))


def test_sequence_log_ratio_clamped_from_above_only() -> None:
    logp = torch.tensor([[30.0, -30.0]], dtype=F64)
    log_ratio, z = sequence_log_ratio(logp, torch.zeros_like(logp), torch.tensor([[True, False]]))
    assert float(z[0]) == 30.0 and float(log_ratio[0, 0]) == 10.0
    log_ratio, _ = sequence_log_ratio(-logp, torch.zeros_like(logp), torch.tensor([[True, False]]))
    assert float(log_ratio[0, 0]) == -30.0


def test_sequence_level_refusals() -> None:
    logp = torch.zeros(2, 3, dtype=F64)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    varying = torch.tensor([[1.0, 2.0, 0.0], [1.0, 1.0, 1.0]], dtype=F64)
    with pytest.raises(ValueError, match="one advantage per"):
        clipped_policy_loss(logp, logp, varying, mask, importance_sampling_level="sequence")
    # Constant over the trained tokens is fine, whatever the padding holds.
    constant = torch.tensor([[1.0, 1.0, 9.0], [2.0, 2.0, 2.0]], dtype=F64)
    clipped_policy_loss(logp, logp, constant, mask, importance_sampling_level="sequence")
    with pytest.raises(ValueError, match="lower_bound_ratio"):
        clipped_policy_loss(logp, logp, constant[:, 0], mask, importance_sampling_level="sequence", lower_bound_ratio=3)
    with pytest.raises(ValueError, match="lower_bound_ratio"):
        clipped_policy_loss(logp, logp, constant[:, 0], mask, lower_bound_ratio=0.5)
    with pytest.raises(ValueError, match="importance_sampling_level"):
        clipped_policy_loss(logp, logp, constant[:, 0], mask, importance_sampling_level="token-mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="advantages"):
        clipped_policy_loss(logp, logp, torch.zeros(3), mask)


def _loop_clipped_loss(
    logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, level: str, loss_type: str, c: float
) -> torch.Tensor:
    """Independent reference with autograd through per-element scalar ops: the paper's formulas written directly.

    Sequence level uses the TRUE GSPO ratio s_i = exp(mean_t(logp - old)) (gradient through the mean), not the
    GSPO-token form, so agreement of gradients checks the GSPO-token identity as well.
    """
    eps_low, eps_high, max_tokens = 0.2, 0.28, 7
    rows: list[list[torch.Tensor]] = []
    for b in range(logp.shape[0]):
        idx = [t for t in range(logp.shape[1]) if bool(mask[b, t])]
        if not idx:
            continue
        if level == "sequence":
            z = torch.stack([logp[b, t] - old[b, t] for t in idx]).mean()
            ratios = [torch.exp(z)] * len(idx)
        else:
            ratios = [torch.exp(logp[b, t] - old[b, t]) for t in idx]
        row = []
        for t, r in zip(idx, ratios, strict=True):
            a = float(adv[b, t])
            lo = -a * r
            hi = -a * torch.clamp(r, 1 - eps_low, 1 + eps_high)
            loss = torch.maximum(lo, hi)
            if c > 0 and a < 0:
                loss = torch.minimum(loss, torch.tensor(-a * c, dtype=F64))
            row.append(loss)
        rows.append(row)
    n_tok = sum(len(r) for r in rows)
    if loss_type == "token-mean":
        return sum(sum(r) for r in rows) / n_tok  # type: ignore[return-value]
    if loss_type == "seq-mean-token-sum":
        return sum(sum(r) for r in rows) / len(rows)  # type: ignore[return-value]
    if loss_type == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)  # type: ignore[return-value]
    return sum(sum(r) for r in rows) / (len(rows) * max_tokens)  # type: ignore[return-value]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_clipped_loss_matches_loop_reference(level: str, loss_type: str) -> None:
    torch.manual_seed(10)
    logp = (0.3 * torch.randn(5, 6, dtype=F64)).requires_grad_(True)
    old = 0.3 * torch.randn(5, 6, dtype=F64)
    adv = torch.randn(5, dtype=F64)[:, None].expand(5, 6).clone()  # constant per response (valid at both levels)
    if level == "token":
        adv = torch.randn(5, 6, dtype=F64)  # the token level also takes genuinely per-token advantages
    mask = torch.rand(5, 6) > 0.3
    mask[3] = False
    c = 0.0 if level == "sequence" else 2.0
    loss, _ = clipped_policy_loss(
        logp,
        old,
        adv,
        mask,
        epsilon_low=0.2,
        epsilon_high=0.28,
        lower_bound_ratio=c,
        importance_sampling_level=level,  # type: ignore[arg-type]
        loss_type=loss_type,  # type: ignore[arg-type]
        max_tokens=7,
    )
    reference = _loop_clipped_loss(logp, old, adv, mask, level, loss_type, c)
    assert float(loss.detach()) == pytest.approx(float(reference.detach()), abs=1e-12)
    (grad,) = torch.autograd.grad(loss, logp)
    (ref_grad,) = torch.autograd.grad(reference, logp)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_gspo_token_form_gradcheck(loss_type: str) -> None:
    # Under a per-response advantage the GSPO-token loss's value is a genuine function of logp (the response ratio)
    # and its stop-gradient gradient must be that function's derivative: plain gradcheck, float64.
    torch.manual_seed(11)
    old = 0.2 * torch.randn(3, 4, dtype=F64)
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=F64)
    mask = torch.tensor([[True, True, True, False], [True, True, False, False], [True, True, True, True]])
    logp = (old + 0.05 * torch.randn(3, 4, dtype=F64)).requires_grad_(True)

    def loss_of(lp: torch.Tensor) -> torch.Tensor:
        loss, _ = clipped_policy_loss(
            lp,
            old,
            adv,
            mask,
            epsilon_low=0.3,
            epsilon_high=0.3,
            importance_sampling_level="sequence",
            loss_type=loss_type,  # type: ignore[arg-type]
            max_tokens=5,
        )
        return loss

    assert torch.autograd.gradcheck(loss_of, (logp,), eps=1e-6, atol=1e-8)


def test_legacy_pg_loss() -> None:
    # l_t = -A log p: row 0 = -(2 * ln 0.5) = 2 ln 2 per token (2 tokens), row 1 = -(-1 * ln 0.25) = -2 ln 2 (1 token).
    # token-mean = (2 ln2 * 2 - 2 ln2) / 3 = (2/3) ln 2; d/dlogp = -A / 3.
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.9]], dtype=F64)).requires_grad_(True)
    adv = torch.tensor([2.0, -1.0], dtype=F64)
    mask = torch.tensor([[True, True], [True, False]])
    loss = legacy_pg_loss(logp, adv, mask)
    assert float(loss.detach()) == pytest.approx(2 / 3 * math.log(2), abs=1e-12)
    (grad,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(grad, torch.tensor([[-2 / 3, -2 / 3], [1 / 3, 0.0]], dtype=F64))
