"""Clipped value loss against hand values and a loop reference."""

import pytest
import torch

from lightning_rl.algorithms import LOSS_TYPES, clipped_value_loss

pytestmark = pytest.mark.unit
F64 = torch.float64


def test_clipped_value_loss_by_hand() -> None:
    # c = 0.2. Token 0: V = 1, V_old = 0.5, R = 2.
    #   unclipped (1 - 2)^2 = 1; V_clip = 0.5 + clip(0.5, -0.2, 0.2) = 0.7 -> (0.7 - 2)^2 = 1.69; 0.5 * 1.69 = 0.845.
    #   The clipped branch wins and is saturated: gradient 0.
    # Token 1: V = 2, V_old = 2, R = 1: both branches (2 - 1)^2 = 1 -> 0.5; not clipped; gradient (V - R) / 2 = 0.5.
    # Token 2 is padding. token-mean = (0.845 + 0.5) / 2 = 0.6725, value_clip_frac = 1/2.
    values = torch.tensor([[1.0, 2.0, 50.0]], dtype=F64, requires_grad=True)
    old_values = torch.tensor([[0.5, 2.0, 0.0]], dtype=F64)
    returns = torch.tensor([[2.0, 1.0, 0.0]], dtype=F64)
    mask = torch.tensor([[True, True, False]])
    loss, clip_frac = clipped_value_loss(values, old_values, returns, mask, clip_range=0.2)
    assert float(loss.detach()) == pytest.approx(0.6725, abs=1e-12)
    assert float(clip_frac) == pytest.approx(0.5, abs=1e-12)
    (grad,) = torch.autograd.grad(loss, values)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.5, 0.0]], dtype=F64))

    # clip_range <= 0: plain 0.5 * MSE = 0.5 * (1 + 1) / 2 = 0.5, nothing clipped.
    loss, clip_frac = clipped_value_loss(values, old_values, returns, mask, clip_range=0.0)
    assert float(loss.detach()) == pytest.approx(0.5, abs=1e-12) and float(clip_frac) == 0.0


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_clipped_value_loss_matches_loop(loss_type: str) -> None:
    torch.manual_seed(7)
    values, old_values, returns = (torch.randn(4, 5, dtype=F64) for _ in range(3))
    mask = torch.rand(4, 5) > 0.3
    mask[1] = False
    loss, clip_frac = clipped_value_loss(values, old_values, returns, mask, 0.3, loss_type, max_tokens=6)  # type: ignore[arg-type]
    per_seq: list[list[float]] = []
    n_clipped = 0
    for b in range(4):
        row = []
        for t in range(5):
            if not mask[b, t]:
                continue
            v, vo, r = float(values[b, t]), float(old_values[b, t]), float(returns[b, t])
            vc = vo + min(max(v - vo, -0.3), 0.3)
            n_clipped += (vc - r) ** 2 > (v - r) ** 2
            row.append(0.5 * max((v - r) ** 2, (vc - r) ** 2))
        if row:
            per_seq.append(row)
    n_tok = sum(len(r) for r in per_seq)
    expected = {
        "token-mean": sum(map(sum, per_seq)) / n_tok,
        "seq-mean-token-sum": sum(map(sum, per_seq)) / len(per_seq),
        "seq-mean-token-mean": sum(sum(r) / len(r) for r in per_seq) / len(per_seq),
        "seq-mean-token-sum-fixed": sum(map(sum, per_seq)) / (len(per_seq) * 6),
    }[loss_type]
    assert float(loss) == pytest.approx(expected, abs=1e-12)
    assert float(clip_frac) == pytest.approx(n_clipped / n_tok, abs=1e-12)
