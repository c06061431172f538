"""Score centering: hand values, exact no-op at q == p, drift-freedom under the sampler, and gradcheck."""

import math

import pytest
import torch

from lightning_rl.algorithms import score_centering_loss, token_logprobs

pytestmark = pytest.mark.unit
F64 = torch.float64
P = [0.5, 0.3, 0.2]
Q = [0.6, 0.25, 0.15]


def _one_token(compose: str, **kw: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V = 3, policy p = P, sampler q = Q, head H = {0, 1}, sampled y = 0, A = 2, surrogate loss 1 (a constant)."""
    logits = torch.log(torch.tensor(P, dtype=F64)).reshape(1, 1, 3).requires_grad_(True)
    head = torch.tensor([[[0, 1]]])
    loss_mat, _ = score_centering_loss(
        torch.ones(1, 1, dtype=F64),
        token_logprobs(logits, torch.tensor([[0]]), dtype=F64),
        torch.log(torch.tensor([[Q[0]]], dtype=F64)),
        token_logprobs(logits, head, dtype=F64),
        torch.log(torch.tensor([[Q[:2]]], dtype=F64)),
        torch.tensor([2.0], dtype=F64),
        torch.ones(1, 1, dtype=torch.bool),
        compose=compose,  # type: ignore[arg-type]
        **kw,
    )
    (grad,) = torch.autograd.grad(loss_mat.sum(), logits)
    return loss_mat.detach(), grad.reshape(3), logits


def test_pure_centering_by_hand() -> None:
    # compose=none (f = 1): p_tail = 0.2, q_tail = 0.15 -> rho = alpha = 0.75.
    #   c_0 = q_0 - alpha p_0 = 0.6 - 0.375 = 0.225,   c_1 = 0.25 - 0.225 = 0.025
    #   loss = 1 * 1 + A (c_0 ln p_0 + c_1 ln p_1) = 1 + 2 (0.225 ln 0.5 + 0.025 ln 0.3)
    # d/dlogit_j of sum_H c_v log p_v = c_j 1[j in H] - (sum_H c) p_j, sum_H c = 0.25, times A = 2:
    #   j=0: 2 (0.225 - 0.125) = 0.2;  j=1: 2 (0.025 - 0.075) = -0.1;  j=2: 2 (0 - 0.05) = -0.1
    loss, grad, _ = _one_token("none")
    assert float(loss) == pytest.approx(1 + 2 * (0.225 * math.log(0.5) + 0.025 * math.log(0.3)), abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([0.2, -0.1, -0.1], dtype=F64), atol=1e-12, rtol=0)


def test_untruncated_tis_needs_no_centering() -> None:
    # tis, clip 2: w_0 = p_0/q_0 = 5/6, w_1 = 1.2 (both below the clip) -> q_v w_v = p_v;
    # rho = 0.75, alpha = 0.75 * min(1/0.75, 2) = 1 -> every c_v = p_v - p_v = 0. Surrogate weight f(p_y/q_y) = 5/6.
    loss, grad, _ = _one_token("tis", tis_clip=2.0)
    assert float(loss) == pytest.approx(5 / 6, abs=1e-12)
    torch.testing.assert_close(grad, torch.zeros(3, dtype=F64), atol=1e-12, rtol=0)


def test_masked_is_by_hand() -> None:
    # mis, [0.9, 5]: w_0 = 5/6 < 0.9 -> 0, w_1 = 1.2 kept; 1/rho = 4/3 kept -> alpha = 0.75 * 4/3 = 1.
    #   c_0 = 0 - 0.5 = -0.5, c_1 = 0.25 * 1.2 - 0.3 = 0; the sampled token's weight is 0.
    #   loss = 0 * 1 + 2 * (-0.5 ln 0.5) = ln 2;  grad_j = 2 (c_j 1[j in H] - (-0.5) p_j) = [-0.5, 0.3, 0.2]
    loss, grad, _ = _one_token("mis", mis_low=0.9, mis_high=5.0)
    assert float(loss) == pytest.approx(math.log(2), abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([-0.5, 0.3, 0.2], dtype=F64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("compose", ["none", "tis", "mis"])
def test_identical_sampler_is_a_bitwise_no_op(compose: str) -> None:
    torch.manual_seed(12)
    logits = torch.randn(3, 4, 11).requires_grad_(True)
    ids = torch.randint(0, 11, (3, 4))
    head = torch.topk(logits.detach(), 5, dim=-1).indices
    mask = torch.rand(3, 4) > 0.2
    adv = torch.randn(3)
    logp = token_logprobs(logits, ids)
    surrogate = -adv[:, None] * torch.exp(logp - logp.detach())
    plain = torch.where(mask, surrogate, 0.0)
    topk_logp = token_logprobs(logits, head)
    loss_mat, stats = score_centering_loss(
        surrogate,
        logp,
        logp.detach(),
        topk_logp,
        topk_logp.detach(),
        adv,
        mask,
        compose=compose,  # type: ignore[arg-type]
    )
    assert torch.equal(loss_mat, plain)
    (grad,) = torch.autograd.grad(loss_mat.sum(), logits, retain_graph=True)
    (grad_plain,) = torch.autograd.grad(plain.sum(), logits)
    assert torch.equal(grad, grad_plain)
    assert float(stats.weight_mean) == 1.0 and float(stats.rho_mean) == 1.0 and float(stats.head_mass_gap) == 0.0


@pytest.mark.parametrize(("compose", "kw"), [("none", {}), ("tis", {"tis_clip": 1.1}), ("mis", {"mis_low": 0.8})])
def test_expected_gradient_under_sampler_is_drift_free(compose: str, kw: dict[str, float]) -> None:
    # A constant advantage carries no signal, so E_{y~q}[grad] must vanish. Build q with the tail assumption exact
    # (q_v = rho p_v off the head), score every possible sampled token y as its own row and weight rows by q_y.
    torch.manual_seed(13)
    vocab, k = 8, 3
    logits = torch.randn(vocab, dtype=F64).requires_grad_(True)
    p = torch.softmax(logits.detach(), -1)
    head = torch.tensor([1, 4, 6])
    q = p.clone()
    q[head] = torch.tensor([0.3, 0.25, 0.2], dtype=F64)
    tail = torch.ones(vocab, dtype=torch.bool)
    tail[head] = False
    q[tail] = p[tail] * (1 - q[head].sum()) / p[tail].sum()
    batch_logits = logits.expand(vocab, 1, vocab)
    logp_y = token_logprobs(batch_logits, torch.arange(vocab).reshape(vocab, 1), dtype=F64)
    surrogate = -2.0 * torch.exp(logp_y - logp_y.detach())  # A = 2 for every y: -A r with r = 1 in value
    args = (
        surrogate,
        logp_y,
        torch.log(q).reshape(vocab, 1),
        token_logprobs(batch_logits, head.expand(vocab, 1, k), dtype=F64),
        torch.log(q[head]).expand(vocab, 1, k),
        torch.full((vocab,), 2.0, dtype=F64),
        torch.ones(vocab, 1, dtype=torch.bool),
    )
    loss_mat, _ = score_centering_loss(*args, compose=compose, **kw)  # type: ignore[arg-type]
    (expected_grad,) = torch.autograd.grad((q * loss_mat[:, 0]).sum(), logits, retain_graph=True)
    torch.testing.assert_close(expected_grad, torch.zeros(vocab, dtype=F64), atol=1e-12, rtol=0)
    # Without centering the mismatch drifts: E_q[-A grad log p_y] = -A (q - p) != 0 (so the check above can fail).
    (drift,) = torch.autograd.grad((q * surrogate[:, 0]).sum(), logits)
    torch.testing.assert_close(drift, -2.0 * (q - p), atol=1e-12, rtol=0)
    assert float(drift.abs().max()) > 1e-2


def test_gradcheck_against_frozen_coefficient_reference() -> None:
    # The correction's gradient is that of A * sum_H c_v log p_v with c frozen at the current point, and the surrogate's
    # that of f * l with f frozen. gradcheck's numerical side differentiates an independent reference built from frozen
    # coefficients (computed here with Python floats); the analytic side is score_centering_loss's backward.
    torch.manual_seed(14)
    vocab = 6
    logits0 = torch.randn(2, 1, vocab, dtype=F64)
    ids = torch.tensor([[0], [3]])
    head = torch.tensor([[[0, 2]], [[3, 5]]])
    q_head = torch.tensor([[[0.4, 0.2]], [[0.3, 0.1]]], dtype=F64)
    q_y = torch.tensor([[0.4], [0.3]], dtype=F64)
    adv = torch.tensor([1.5, -0.7], dtype=F64)
    mask = torch.ones(2, 1, dtype=torch.bool)
    tis_clip = 1.3

    def ours(logits: torch.Tensor) -> torch.Tensor:
        logp = token_logprobs(logits, ids, dtype=F64)
        surrogate = -adv[:, None] * torch.exp(logp - logp.detach())
        loss_mat, _ = score_centering_loss(
            surrogate, logp, q_y.log(), token_logprobs(logits, head, dtype=F64), q_head.log(), adv, mask,
            compose="tis", tis_clip=tis_clip,
        )  # fmt: skip
        return loss_mat

    p0 = torch.softmax(logits0, -1)
    coefs, weights = [], []
    for b in range(2):
        ph = [float(p0[b, 0, v]) for v in head[b, 0]]
        qh = [float(x) for x in q_head[b, 0]]
        rho = (1 - sum(qh)) / (1 - sum(ph))
        alpha = rho * min(1 / rho, tis_clip)
        coefs.append([q * min(pv / q, tis_clip) - alpha * pv for pv, q in zip(ph, qh, strict=True)])
        weights.append(min(float(p0[b, 0, ids[b, 0]]) / float(q_y[b, 0]), tis_clip))

    def reference(logits: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits, -1)
        rows = []
        for b in range(2):
            a = float(adv[b])
            surrogate = -a * torch.exp(logp[b, 0, ids[b, 0]] - math.log(float(p0[b, 0, ids[b, 0]])))
            corr = sum(c * logp[b, 0, v] for c, v in zip(coefs[b], head[b, 0].tolist(), strict=True))
            rows.append(weights[b] * surrogate + a * corr)
        return torch.stack(rows).reshape(2, 1)

    torch.testing.assert_close(ours(logits0), reference(logits0), atol=1e-12, rtol=0)

    def wrapped(logits: torch.Tensor) -> torch.Tensor:
        # Value: the reference (out - sg[out] is exactly 0); gradient: ours.
        out = ours(logits)
        return out - out.detach() + reference(logits).detach()

    x = logits0.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(wrapped, (x,), eps=1e-6, atol=1e-8)


def test_padded_head_slot_is_ignored() -> None:
    # A -inf sampler logprob marks a padded top-k slot: appending one (pointing at any id) changes nothing.
    _, grad, logits = _one_token("none")
    loss_mat, _ = score_centering_loss(
        torch.ones(1, 1, dtype=F64),
        token_logprobs(logits, torch.tensor([[0]]), dtype=F64),
        torch.log(torch.tensor([[Q[0]]], dtype=F64)),
        token_logprobs(logits, torch.tensor([[[0, 1, 2]]]), dtype=F64),
        torch.log(torch.tensor([[[Q[0], Q[1], 0.0]]], dtype=F64)),
        torch.tensor([2.0], dtype=F64),
        torch.ones(1, 1, dtype=torch.bool),
    )
    assert float(loss_mat.detach()) == pytest.approx(1 + 2 * (0.225 * math.log(0.5) + 0.025 * math.log(0.3)), abs=1e-12)
    (padded_grad,) = torch.autograd.grad(loss_mat.sum(), logits)
    torch.testing.assert_close(padded_grad.reshape(3), grad, atol=1e-12, rtol=0)


def test_refuses_bad_settings() -> None:
    z = torch.zeros(1, 1)
    zk = torch.zeros(1, 1, 2)
    m = torch.ones(1, 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="compose"):
        score_centering_loss(z, z, z, zk, zk, z[0], m, compose="is")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tis_clip"):
        score_centering_loss(z, z, z, zk, zk, z[0], m, compose="tis", tis_clip=0.0)
    with pytest.raises(ValueError, match="mis_low"):
        score_centering_loss(z, z, z, zk, zk, z[0], m, compose="mis", mis_low=2.0, mis_high=1.0)
    with pytest.raises(ValueError, match="top-k"):
        score_centering_loss(z, z, z, zk, torch.zeros(1, 1, 3), z[0], m)
