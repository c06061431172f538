"""The PPO critic loss with value clipping."""

from __future__ import annotations

import torch

from lightning_rl.algorithms.reduction import LossType, aggregate_loss, masked_mean


def clipped_value_terms(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    clip_range: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped value loss [B, T] (0 where masked out) and the bool [B, T] map of tokens where clipping won.

    See ``clipped_value_loss``; exposed for chunked accumulation with ``LossAccumulator``.
    """
    if not (values.shape == old_values.shape == returns.shape == response_mask.shape):
        raise ValueError(
            f"values {tuple(values.shape)}, old_values {tuple(old_values.shape)}, returns {tuple(returns.shape)} and "
            f"response_mask {tuple(response_mask.shape)} must all be [B, T]"
        )
    mask = response_mask.bool()
    returns = returns.detach()
    old_values = old_values.detach()
    unclipped = (values - returns) ** 2
    if clip_range > 0:
        # V_clip = V_old + clip(V - V_old, -c, c): the critic may move at most c per update on each token.
        values_clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
        clipped_sq = (values_clipped - returns) ** 2
        # Pessimistic (larger) of the two squared errors, as in OpenAI baselines' PPO2.
        loss_mat = 0.5 * torch.maximum(unclipped, clipped_sq)
        clipped = clipped_sq > unclipped
    else:
        loss_mat = 0.5 * unclipped
        clipped = torch.zeros_like(mask)
    return torch.where(mask, loss_mat, 0.0), clipped & mask


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    clip_range: float = 0.2,
    loss_type: LossType = "token-mean",
    max_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss of PPO (OpenAI baselines PPO2; analysed by Engstrom et al. 2020, arXiv 2005.12729, sec. 3):

        l_t = 0.5 * max((V_t - R_t)^2, (V_old_t + clip(V_t - V_old_t, -c, c) - R_t)^2)

    Args:
        values: [B, T] current critic values (with gradient); old_values: [B, T] the values GAE used; returns: [B, T]
            the lambda-returns (targets); response_mask: [B, T] bool.
        clip_range: c; ``clip_range <= 0`` disables clipping (plain 0.5 * MSE).
        loss_type / max_tokens: the reduction (``aggregate_loss``).

    Returns:
        (loss scalar, value_clip_frac): the token-weighted fraction of trained tokens whose clipped error was larger
        (detached).
    """
    loss_mat, clipped = clipped_value_terms(values, old_values, returns, response_mask, clip_range)
    clip_frac = masked_mean(clipped.to(loss_mat.dtype), response_mask).detach()
    return aggregate_loss(loss_mat, response_mask, loss_type, max_tokens), clip_frac
