"""Masked statistics and the one owner of every loss reduction mode.

Every loss in the project is built as a per-token matrix ``loss_mat`` [B, T] aligned with ``response_mask`` [B, T]
(True = trained token) and reduced here, so no method re-implements normalisation (verl's ``agg_loss`` pattern).

Reductions (``LossType``):
    token-mean                 sum_{b,t} m l / sum_{b,t} m           (DAPO's token-level loss, arXiv 2503.14476)
    seq-mean-token-sum         (1/S) sum_b sum_t m l                  S = sequences with >= 1 trained token
    seq-mean-token-mean        (1/S) sum_b (sum_t m l / sum_t m)      (the original GRPO / GSPO per-response mean)
    seq-mean-token-sum-fixed   sum_{b,t} m l / (S * max_tokens)       (Dr-GRPO, Liu et al. 2025, arXiv 2503.20783)

Every divisor is an integer count of the whole optimizer window, which is what makes chunked accumulation exact: see
``LossAccumulator``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

LossType = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-fixed"]
LOSS_TYPES: tuple[str, ...] = get_args(LossType)


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over positions where ``mask`` is True; masked-out entries never enter (even NaN/inf ones)."""
    mask = mask.bool().expand_as(x)
    picked = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return picked.sum() if dim is None else picked.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over ``mask`` (True = counted), over all elements (``dim=None``) or along ``dim``.

    Shapes: ``x`` any shape, ``mask`` broadcastable to it. An empty slice has mean 0 (its divisor is clamped to 1), so
    an all-masked batch yields a zero loss instead of NaN.
    """
    count = mask.bool().expand_as(x).sum() if dim is None else mask.bool().expand_as(x).sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over ``mask`` (all dims). ``unbiased`` applies Bessel's correction n/(n-1) (verl's
    ``masked_var``); with fewer than two counted entries the divisor is clamped to 1, giving 0 for one entry."""
    mean = masked_mean(x, mask)
    count = mask.bool().expand_as(x).sum()
    sq = masked_sum((x - mean) ** 2, mask)
    divisor = (count - 1 if unbiased else count).clamp(min=1)
    return sq / divisor


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """PPO advantage whitening over the masked entries: (x - mean) / sqrt(var + eps).

    Shapes: ``x`` [B, T], ``mask`` [B, T] -> [B, T], 0 on masked-out positions. Statistics are taken over every masked
    token of the batch (Bessel-corrected variance, as verl / OpenAI baselines). ``shift_mean=False`` adds the mean back,
    rescaling without re-centring (used for rewards, where the sign carries meaning).
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask, unbiased=True)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask.bool().expand_as(x), whitened, torch.zeros((), dtype=whitened.dtype, device=x.device))


def _check_loss_type(loss_type: str, max_tokens: int | None) -> None:
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type={loss_type!r} is not one of {', '.join(LOSS_TYPES)}")
    if loss_type == "seq-mean-token-sum-fixed" and (max_tokens is None or max_tokens <= 0):
        raise ValueError(
            f"loss_type='seq-mean-token-sum-fixed' divides by a fixed max_tokens; pass the rollout's positive "
            f"max_tokens (got {max_tokens!r})"
        )


@dataclass(frozen=True)
class LossAccumulator:
    """Exact chunked reduction: numerators are summed per micro-batch, the divisor is fixed once per optimizer window.

    Every ``LossType`` is ``numerator / divisor`` where the numerator is a SUM over sequences (so it splits across
    chunks that hold whole sequences) and the divisor is an integer count over the whole window. Computing the divisor
    up front from the window's mask and back-propagating ``chunk_loss_sum(chunk) / divisor`` per chunk therefore
    accumulates exactly the gradient of the unchunked loss, whatever the micro-batch size::

        acc = LossAccumulator("seq-mean-token-mean")
        divisor = acc.window_divisor(window_response_mask)          # [B_window, T] -> 0-dim int64
        for loss_mat, mask in chunks:                                  # each [b, T], sequences never split
            (acc.chunk_loss_sum(loss_mat, mask) / divisor).backward()

    Under data parallelism all-reduce (SUM) the divisor across ranks first; the per-rank gradients then add up to the
    global loss's gradient (scale by the world size if the wrapper averages gradients).
    """

    loss_type: LossType = "token-mean"
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_loss_type(self.loss_type, self.max_tokens)

    def window_divisor(self, response_mask: torch.Tensor) -> torch.Tensor:
        """[B, T] mask of the WHOLE window -> 0-dim int64 divisor (>= 1, so an empty window gives a zero loss)."""
        mask = response_mask.bool()
        if self.loss_type == "token-mean":
            count = mask.sum()
        else:
            # Sequences with no trained token (empty or fully masked completions) do not count.
            count = mask.any(dim=-1).sum()
            if self.loss_type == "seq-mean-token-sum-fixed":
                assert self.max_tokens is not None  # checked in __post_init__
                count = count * self.max_tokens
        return count.clamp(min=1)

    def chunk_loss_sum(self, loss_mat: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """[b, T] per-token losses of one chunk (whole sequences) -> 0-dim numerator contribution."""
        if loss_mat.shape != response_mask.shape:
            raise ValueError(f"loss_mat {tuple(loss_mat.shape)} and response_mask {tuple(response_mask.shape)} differ")
        if self.loss_type == "seq-mean-token-mean":
            # Per-sequence means need only that sequence's own token count, which a chunk always holds whole.
            per_seq = masked_sum(loss_mat, response_mask, dim=-1) / response_mask.bool().sum(-1).clamp(min=1)
            return per_seq.sum()
        # token-mean, seq-mean-token-sum and the fixed variant share the plain masked sum as numerator.
        return masked_sum(loss_mat, response_mask)


def aggregate_loss(
    loss_mat: torch.Tensor,
    response_mask: torch.Tensor,
    loss_type: LossType = "token-mean",
    max_tokens: int | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss [B, T] over ``response_mask`` [B, T] to a scalar with one of the ``LossType`` modes.

    Equivalent to a one-chunk ``LossAccumulator`` window (see the module docstring for each formula).
    """
    acc = LossAccumulator(loss_type, max_tokens)
    return acc.chunk_loss_sum(loss_mat, response_mask) / acc.window_divisor(response_mask)
