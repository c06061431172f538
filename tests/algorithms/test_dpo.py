"""The sigmoid DPO loss against hand values and a loop reference."""

import math

import pytest
import torch

from lightning_rl.algorithms import dpo_loss, sequence_logprobs

pytestmark = pytest.mark.unit
F64 = torch.float64


def test_dpo_by_hand() -> None:
    # Pair 0: log-ratios chosen -1 - (-2) = 1, rejected -3 - (-2) = -1, beta = 0.5 -> h = 0.5 * 2 = 1,
    #   loss = -log sigmoid(1) = log(1 + e^-1); d loss / d policy_chosen = -beta sigmoid(-h).
    # Pair 1: chosen log-ratio 0, rejected +2 -> h = -1, loss = log(1 + e); the rejected response is preferred.
    # Batch: mean loss; rewards chosen (0.5 + 0) / 2, rejected (-0.5 + 1) / 2; margin (1 + (-1)) / 2 = 0;
    # accuracy 1/2.
    chosen = torch.tensor([-1.0, -2.0], dtype=F64, requires_grad=True)
    rejected = torch.tensor([-3.0, 0.0], dtype=F64, requires_grad=True)
    ref = torch.tensor([-2.0, -2.0], dtype=F64)
    loss, stats = dpo_loss(chosen, rejected, ref, ref, beta=0.5)
    assert float(loss.detach()) == pytest.approx((math.log(1 + math.exp(-1)) + math.log(1 + math.e)) / 2, abs=1e-12)
    assert float(stats.chosen_rewards) == pytest.approx(0.25, abs=1e-12)
    assert float(stats.rejected_rewards) == pytest.approx(0.25, abs=1e-12)
    assert float(stats.margin) == pytest.approx(0.0, abs=1e-12) and float(stats.accuracy) == 0.5
    (grad,) = torch.autograd.grad(loss, chosen)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    torch.testing.assert_close(grad, torch.tensor([-0.5 * sig(-1) / 2, -0.5 * sig(1) / 2], dtype=F64))


def test_policy_equal_to_reference_gives_log_two() -> None:
    logps = torch.randn(5, dtype=F64)
    loss, stats = dpo_loss(logps, logps + 1, logps, logps + 1, beta=0.1)
    assert float(loss) == pytest.approx(math.log(2), abs=1e-12) and float(stats.margin) == 0.0


def test_dpo_matches_loop_with_label_smoothing() -> None:
    torch.manual_seed(17)
    pc, pr, rc, rr = (torch.randn(6, dtype=F64) for _ in range(4))
    loss, _ = dpo_loss(pc, pr, rc, rr, beta=0.3, label_smoothing=0.1)
    total = 0.0
    for i in range(6):
        h = 0.3 * ((float(pc[i]) - float(rc[i])) - (float(pr[i]) - float(rr[i])))
        total += -0.9 * math.log(1 / (1 + math.exp(-h))) - 0.1 * math.log(1 / (1 + math.exp(h)))
    assert float(loss) == pytest.approx(total / 6, abs=1e-12)


def test_sequence_logprobs_and_refusals() -> None:
    tok = torch.tensor([[-1.0, -2.0, -9.0]], dtype=F64)
    assert float(sequence_logprobs(tok, torch.tensor([[True, True, False]]))[0]) == -3.0
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(tok[0], tok[0], tok[0], tok[0], beta=0.0)
