"""KL estimators, the kl_coeff_clamp straight-through gradient, and kl_stats."""

import math

import pytest
import torch

from lightning_rl.algorithms import k3_kl, kl_k1, kl_k2, kl_k3, kl_stats

pytestmark = pytest.mark.unit
F64 = torch.float64


def test_estimators_by_hand() -> None:
    # pi_theta(y) = 0.5, pi_ref(y) = 0.25: x = log 2, z = -log 2.
    # k1 = ln 2 = 0.693147..., k2 = 0.5 ln^2 2 = 0.240227..., k3 = e^{-ln 2} + ln 2 - 1 = 0.5 + ln 2 - 1 = 0.193147...
    logp = torch.tensor([[math.log(0.5)]], dtype=F64, requires_grad=True)
    ref = torch.tensor([[math.log(0.25)]], dtype=F64)
    assert float(kl_k1(logp, ref).detach()) == pytest.approx(math.log(2), abs=1e-12)
    assert float(kl_k2(logp, ref).detach()) == pytest.approx(0.5 * math.log(2) ** 2, abs=1e-12)
    k3 = kl_k3(logp, ref)
    assert float(k3.detach()) == pytest.approx(math.log(2) - 0.5, abs=1e-12)
    # d k3 / d logp = 1 - exp(z) = 1 - 0.5 = 0.5.
    (grad,) = torch.autograd.grad(k3.sum(), logp)
    assert float(grad) == pytest.approx(0.5, abs=1e-12)


def test_k3_is_zero_at_equality_and_non_negative() -> None:
    torch.manual_seed(8)
    logp = torch.randn(5, 6, dtype=F64)
    assert torch.equal(kl_k3(logp, logp), torch.zeros_like(logp))
    assert bool((kl_k3(logp, torch.randn(5, 6, dtype=F64)) >= 0).all())


def test_k3_value_clamps_at_20_nats() -> None:
    logp = torch.tensor([[0.0]], dtype=F64, requires_grad=True)
    ref = torch.tensor([[25.0]], dtype=F64)  # z = 25 -> clamped to 20
    value = k3_kl(logp, ref)
    assert float(value.detach()) == pytest.approx(math.exp(20) - 21, rel=1e-12)
    (grad,) = torch.autograd.grad(value.sum(), logp)
    assert float(grad) == 0.0  # beyond the clamp the exact gradient is 0 ...
    (grad,) = torch.autograd.grad(k3_kl(logp, ref, clamp=5.0).sum(), logp)
    assert float(grad) == 0.0  # ... and so is the clamped one


def test_kl_coeff_clamp_value_exact_gradient_linear_extension() -> None:
    # c = 1. z = ref - logp in {3, -3, 0.5}:
    #   values stay exact: e^3 - 4, e^-3 + 2, e^0.5 - 1.5
    #   gradient coefficients 1 - exp(clamp(z, -1, 1)): 1 - e, 1 - e^-1, 1 - e^0.5 (inside the band: exact)
    logp = torch.zeros(1, 3, dtype=F64, requires_grad=True)
    ref = torch.tensor([[3.0, -3.0, 0.5]], dtype=F64)
    value = k3_kl(logp, ref, clamp=1.0)
    expected = torch.tensor([[math.exp(3) - 4, math.exp(-3) + 2, math.exp(0.5) - 1.5]], dtype=F64)
    torch.testing.assert_close(value.detach(), expected, atol=1e-12, rtol=0)
    (grad,) = torch.autograd.grad(value.sum(), logp)
    expected_grad = torch.tensor([[1 - math.e, 1 - math.exp(-1), 1 - math.exp(0.5)]], dtype=F64)
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)


def _k3_linear_extension(logp: torch.Tensor, ref: torch.Tensor, c: float) -> torch.Tensor:
    """Independent reference: k3(z) inside |z| <= c, its tangent line outside (the function whose gradient the clamp
    applies). k3'(z) = e^z - 1, so beyond +c: k3(c) + (e^c - 1)(z - c); below -c: k3(-c) + (e^-c - 1)(z + c)."""
    z = ref - logp
    k3 = lambda u: math.exp(u) - u - 1  # noqa: E731
    out = torch.empty_like(z)
    for i, zi in enumerate(z.flatten().tolist()):
        if zi > c:
            v = k3(c) + (math.exp(c) - 1) * (zi - c)
        elif zi < -c:
            v = k3(-c) + (math.exp(-c) - 1) * (zi + c)
        else:
            v = k3(zi)
        out.view(-1)[i] = v
    return out


def test_kl_coeff_clamp_gradcheck_against_linear_extension() -> None:
    # gradcheck compares our ANALYTIC gradient with the NUMERICAL derivative of the forward. The wrapper's forward is
    # the independent linear extension (out - sg[out] is exactly 0), while its backward is k3_kl's straight-through
    # gradient: gradcheck passes iff k3_kl's gradient is the linear extension's derivative, in and out of the band.
    ref = torch.tensor([[2.5, -2.5, 0.3, -0.7, 1.6, -4.0]], dtype=F64)
    c = 1.0

    def wrapped(logp: torch.Tensor) -> torch.Tensor:
        out = k3_kl(logp, ref, clamp=c)
        return out - out.detach() + _k3_linear_extension(logp.detach(), ref, c)

    logp = torch.zeros(1, 6, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(wrapped, (logp,), eps=1e-6, atol=1e-7)
    # Without the clamp the exact k3 is its own reference (plain gradcheck, inside the +-20 band).
    assert torch.autograd.gradcheck(lambda lp: k3_kl(lp, ref), (logp,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("bad", [0.0, -1.0, 20.0, 25.0])
def test_kl_coeff_clamp_validated(bad: float) -> None:
    with pytest.raises(ValueError, match="kl_coeff_clamp"):
        k3_kl(torch.zeros(1, 1), torch.zeros(1, 1), clamp=bad)


def test_kl_stats() -> None:
    # Kept {1, 2}: token mean 1.5, max 2 (3 and 6 are padding).
    kl = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    mean, largest = kl_stats(kl, mask)
    assert float(mean) == 1.5 and float(largest) == 2.0
    mean, largest = kl_stats(kl, torch.zeros_like(mask))
    assert float(mean) == 0.0 and float(largest) == 0.0
