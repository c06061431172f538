"""Same-token distillation divergences over the teacher's top-k support."""

import math

import pytest
import torch

from lightning_rl.algorithms import opd_divergence

pytestmark = pytest.mark.unit
F64 = torch.float64


def _pair() -> tuple[torch.Tensor, torch.Tensor]:
    # Un-normalised top-k logprobs: renormalised on the support, teacher T = [0.5, 0.5], student S = [0.25, 0.75].
    teacher = torch.log(torch.tensor([[[0.2, 0.2]]], dtype=F64))
    student = torch.log(torch.tensor([[[0.1, 0.3]]], dtype=F64)).requires_grad_(True)
    return student, teacher


def test_forward_reverse_and_jsd_by_hand() -> None:
    student, teacher = _pair()
    # forward KL(T || S) = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln(4/3)
    fwd = opd_divergence(student, teacher, jsd_beta=0.0)
    assert float(fwd.detach()) == pytest.approx(0.5 * math.log(4 / 3), abs=1e-12)
    # d/du of KL(T || softmax(u)) = S - T = [-0.25, 0.25]
    (grad,) = torch.autograd.grad(fwd.sum(), student)
    torch.testing.assert_close(grad, torch.tensor([[[-0.25, 0.25]]], dtype=F64))
    # reverse KL(S || T) = 0.25 ln(0.25/0.5) + 0.75 ln(0.75/0.5)
    rev = opd_divergence(student, teacher, jsd_beta=1.0)
    assert float(rev.detach()) == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5), abs=1e-12)
    # beta = 0.5: M = [0.375, 0.625]; JSD = 0.5 KL(T || M) + 0.5 KL(S || M)
    kl_tm = 0.5 * math.log(0.5 / 0.375) + 0.5 * math.log(0.5 / 0.625)
    kl_sm = 0.25 * math.log(0.25 / 0.375) + 0.75 * math.log(0.75 / 0.625)
    jsd = opd_divergence(student, teacher, jsd_beta=0.5)
    assert float(jsd.detach()) == pytest.approx(0.5 * kl_tm + 0.5 * kl_sm, abs=1e-12)


def _loop_divergence(s: list[float], t: list[float], beta: float) -> float:
    zs, zt = sum(math.exp(x) for x in s), sum(math.exp(x) for x in t)
    ps, pt = [math.exp(x) / zs for x in s], [math.exp(x) / zt for x in t]

    def kl(a: list[float], b: list[float]) -> float:
        return sum(x * math.log(x / y) for x, y in zip(a, b, strict=True) if x > 0)

    if beta == 0:
        return kl(pt, ps)
    if beta == 1:
        return kl(ps, pt)
    m = [beta * x + (1 - beta) * y for x, y in zip(pt, ps, strict=True)]
    return beta * kl(pt, m) + (1 - beta) * kl(ps, m)


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_divergence_matches_loop(beta: float) -> None:
    torch.manual_seed(18)
    student, teacher = torch.randn(2, 3, 4, dtype=F64), torch.randn(2, 3, 4, dtype=F64)
    out = opd_divergence(student, teacher, jsd_beta=beta)
    for b in range(2):
        for t in range(3):
            expected = _loop_divergence(student[b, t].tolist(), teacher[b, t].tolist(), beta)
            assert float(out[b, t]) == pytest.approx(expected, abs=1e-12)
    assert bool((out >= -1e-15).all())


def test_identical_distributions_and_padding() -> None:
    logp = torch.randn(2, 3, 5, dtype=F64)
    for beta in (0.0, 0.4, 1.0):
        torch.testing.assert_close(opd_divergence(logp, logp, beta), torch.zeros(2, 3, dtype=F64), atol=1e-12, rtol=0)
    # A -inf teacher entry is a padded top-k slot: it leaves the support of BOTH distributions. Renormalised on the
    # remaining two ids the student is [0.5, 0.5] = the teacher -> every divergence is 0, with a finite gradient.
    teacher = torch.log(torch.tensor([[[0.5, 0.5, 0.0]]], dtype=F64))
    student = torch.log(torch.tensor([[[0.25, 0.25, 0.5]]], dtype=F64)).requires_grad_(True)
    for beta in (0.0, 0.4, 1.0):
        out = opd_divergence(student, teacher, beta)
        assert float(out.detach()) == pytest.approx(0.0, abs=1e-12)
        (grad,) = torch.autograd.grad(out.sum(), student)
        assert bool(torch.isfinite(grad).all())
    # Without renormalisation the raw sub-distributions are compared: KL(T || S) = 2 * 0.5 ln(0.5 / 0.25) = ln 2.
    raw = opd_divergence(student, teacher, 0.0, renormalize=False)
    assert float(raw.detach()) == pytest.approx(math.log(2), abs=1e-12)


def test_refusals() -> None:
    x = torch.zeros(1, 1, 2)
    with pytest.raises(ValueError, match="jsd_beta"):
        opd_divergence(x, x, 1.5)
    with pytest.raises(ValueError, match=r"\[B, T, K\]"):
        opd_divergence(x, torch.zeros(1, 1, 3))
