"""Loss reductions: hand values, a loop reference per mode, masked statistics, and exact chunked accumulation."""

import pytest
import torch

from lightning_rl.algorithms import (
    LOSS_TYPES,
    LossAccumulator,
    LossType,
    aggregate_loss,
    masked_mean,
    masked_var,
    masked_whiten,
)

pytestmark = pytest.mark.unit
F64 = torch.float64
MAX_TOKENS = 8


def _loop_reduce(loss_mat: torch.Tensor, mask: torch.Tensor, loss_type: str, max_tokens: int) -> float:
    """Independent reference: plain Python over rows and tokens."""
    seq_sums, seq_means, total, n_tokens = [], [], 0.0, 0
    for b in range(loss_mat.shape[0]):
        kept = [float(loss_mat[b, t]) for t in range(loss_mat.shape[1]) if bool(mask[b, t])]
        total += sum(kept)
        n_tokens += len(kept)
        if kept:  # empty sequences are not counted by any sequence divisor
            seq_sums.append(sum(kept))
            seq_means.append(sum(kept) / len(kept))
    if loss_type == "token-mean":
        return total / max(n_tokens, 1)
    if loss_type == "seq-mean-token-sum":
        return sum(seq_sums) / max(len(seq_sums), 1)
    if loss_type == "seq-mean-token-mean":
        return sum(seq_means) / max(len(seq_means), 1)
    return total / max(len(seq_sums) * max_tokens, 1)


def test_reductions_by_hand() -> None:
    # Trained entries: row 0 -> {1, 2}, row 1 -> {4}, row 2 -> none (an empty completion, ignored everywhere).
    # token-mean                = (1 + 2 + 4) / 3        = 7/3
    # seq-mean-token-sum        = (3 + 4) / 2            = 3.5
    # seq-mean-token-mean       = (1.5 + 4) / 2          = 2.75
    # seq-mean-token-sum-fixed  = 7 / (2 sequences * 4)  = 0.875
    loss_mat = torch.arange(1.0, 10.0, dtype=F64).reshape(3, 3)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    expected: dict[LossType, float] = {
        "token-mean": 7 / 3,
        "seq-mean-token-sum": 3.5,
        "seq-mean-token-mean": 2.75,
        "seq-mean-token-sum-fixed": 0.875,
    }
    for loss_type, value in expected.items():
        assert float(aggregate_loss(loss_mat, mask, loss_type, max_tokens=4)) == pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_reduction_matches_python_loop(loss_type: str) -> None:
    torch.manual_seed(3)
    loss_mat = torch.randn(6, 5, dtype=F64)
    mask = torch.rand(6, 5) > 0.4
    mask[2] = False  # one empty sequence
    got = float(aggregate_loss(loss_mat, mask, loss_type, max_tokens=MAX_TOKENS))  # type: ignore[arg-type]
    assert got == pytest.approx(_loop_reduce(loss_mat, mask, loss_type, MAX_TOKENS), abs=1e-12)


@pytest.mark.parametrize("loss_type", ["token-mean", "seq-mean-token-mean"])
def test_mean_of_constant_loss_is_the_constant(loss_type: str) -> None:
    mask = torch.rand(4, 9) > 0.5
    mask[0, 0] = True
    loss = aggregate_loss(torch.full((4, 9), 0.37, dtype=F64), mask, loss_type)  # type: ignore[arg-type]
    assert float(loss) == pytest.approx(0.37, abs=1e-15)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_chunked_gradient_equals_unchunked(loss_type: str) -> None:
    torch.manual_seed(4)
    params = torch.randn(8, 6, dtype=F64, requires_grad=True)
    weights = torch.randn(8, 6, dtype=F64)
    mask = torch.rand(8, 6) > 0.35
    mask[5] = False

    def loss_mat_of(rows: slice) -> torch.Tensor:
        return (params[rows] * weights[rows]) ** 2 + params[rows]  # any non-linear per-token loss

    full = aggregate_loss(loss_mat_of(slice(None)), mask, loss_type, max_tokens=MAX_TOKENS)  # type: ignore[arg-type]
    (grad_full,) = torch.autograd.grad(full, params)

    acc = LossAccumulator(loss_type, max_tokens=MAX_TOKENS)  # type: ignore[arg-type]
    divisor = acc.window_divisor(mask)
    for chunk_size in (1, 3, 5):
        params.grad = None
        total = torch.zeros((), dtype=F64)
        for start in range(0, 8, chunk_size):
            rows = slice(start, start + chunk_size)
            chunk_loss = acc.chunk_loss_sum(loss_mat_of(rows), mask[rows]) / divisor
            chunk_loss.backward()
            total = total + chunk_loss.detach()
        assert params.grad is not None
        torch.testing.assert_close(params.grad, grad_full, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(total, full.detach(), atol=1e-12, rtol=1e-12)


def test_empty_mask_gives_zero_loss_and_finite_gradient() -> None:
    x = torch.randn(2, 3, dtype=F64, requires_grad=True)
    for loss_type in LOSS_TYPES:
        loss = aggregate_loss(x, torch.zeros(2, 3, dtype=torch.bool), loss_type, max_tokens=4)  # type: ignore[arg-type]
        (grad,) = torch.autograd.grad(loss, x)
        assert float(loss.detach()) == 0.0 and torch.equal(grad, torch.zeros_like(x))


def test_masked_out_nan_never_enters() -> None:
    loss_mat = torch.tensor([[1.0, float("nan")], [3.0, float("inf")]], dtype=F64)
    mask = torch.tensor([[True, False], [True, False]])
    assert float(aggregate_loss(loss_mat, mask)) == 2.0
    assert float(masked_mean(loss_mat, mask)) == 2.0


def test_reduction_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="loss_type"):
        LossAccumulator("sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_tokens"):
        aggregate_loss(torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool), "seq-mean-token-sum-fixed")
    with pytest.raises(ValueError, match="differ"):
        LossAccumulator().chunk_loss_sum(torch.zeros(2, 3), torch.ones(2, 2, dtype=torch.bool))


def test_masked_mean_along_dim() -> None:
    # Row 0 keeps {1, 2} -> 1.5; row 1 keeps nothing -> 0 (divisor clamped to 1).
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 5.0, 6.0]], dtype=F64)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    torch.testing.assert_close(masked_mean(x, mask, dim=-1), torch.tensor([1.5, 0.0], dtype=F64))


def test_masked_whiten_by_hand() -> None:
    # Kept {1, 2, 3}: mean 2, Bessel variance (1 + 0 + 1) / 2 = 1 -> whitened [-1, 0, 1]; padding stays 0.
    x = torch.tensor([[1.0, 2.0], [3.0, 100.0]], dtype=F64)
    mask = torch.tensor([[True, True], [True, False]])
    assert float(masked_var(x, mask)) == pytest.approx(1.0, abs=1e-15)
    torch.testing.assert_close(masked_whiten(x, mask, eps=0.0), torch.tensor([[-1.0, 0.0], [1.0, 0.0]], dtype=F64))
    # shift_mean=False rescales but keeps the mean: (x - 2) / 1 + 2 = x.
    torch.testing.assert_close(masked_whiten(x, mask, shift_mean=False, eps=0.0), torch.where(mask, x, 0.0))
    torch.testing.assert_close(
        masked_whiten(x, mask), torch.tensor([[-1.0, 0.0], [1.0, 0.0]], dtype=F64) / (1 + 1e-8) ** 0.5
    )


def test_masked_whiten_has_zero_mean_unit_variance() -> None:
    torch.manual_seed(5)
    x = 3.0 + 2.0 * torch.randn(7, 11, dtype=F64)
    mask = torch.rand(7, 11) > 0.3
    white = masked_whiten(x, mask, eps=0.0)
    assert abs(float(masked_mean(white, mask))) < 1e-12
    assert float(masked_var(white, mask)) == pytest.approx(1.0, abs=1e-12)
