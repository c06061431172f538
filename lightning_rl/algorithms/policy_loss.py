"""Policy-gradient surrogates: the clipped PPO/GRPO loss (token or sequence ratio, dual clip) and legacy REINFORCE.

All per-token tensors are [B, T] aligned with the response; ``advantages`` is [B, T] or [B] (one per sequence,
broadcast over its tokens). Losses are to be MINIMISED (they are the negated objectives of the papers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from lightning_rl.algorithms.reduction import LossType, aggregate_loss, masked_mean, masked_sum

ImportanceSamplingLevel = Literal["token", "sequence"]

# |log pi_theta - log pi_old| beyond this many nats is clamped before exp (verl's bound): exp(20) ~ 4.9e8 already
# saturates any sensible clip, and exp of a larger value overflows float16/bfloat16 ranges downstream.
TOKEN_LOG_RATIO_CLAMP = 20.0
# GSPO clamps the response log-ratio from above only (verl's ``compute_policy_loss_gspo``): exp(10) ~ 2.2e4.
SEQUENCE_LOG_RATIO_MAX = 10.0


@dataclass(frozen=True)
class PolicyLossStats:
    """Detached diagnostics of one clipped-surrogate evaluation (0-dim tensors).

    clip_frac: token-weighted fraction of trained tokens whose loss the clip (or dual clip) changed.
    dual_clip_frac: token-weighted fraction where the dual clip bound the loss (0 when disabled).
    ratio_absdev: token-weighted mean |r - 1|.
    seq_clip_frac: fraction of valid responses with at least one clipped token.
    seq_log_ratio_abs: mean over valid responses of |z_i|, z_i the mean token log-ratio of response i.
    valid_sequence_count: responses with at least one trained token (the weight of the two seq_* statistics).
    approx_kl: token mean of the k3 estimate of KL(pi_old || pi_theta): (r - 1) - log r (Schulman 2020).
    """

    clip_frac: torch.Tensor
    dual_clip_frac: torch.Tensor
    ratio_absdev: torch.Tensor
    seq_clip_frac: torch.Tensor
    seq_log_ratio_abs: torch.Tensor
    valid_sequence_count: torch.Tensor
    approx_kl: torch.Tensor


def token_advantages(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Broadcast [B] per-sequence advantages to [B, T]; pass [B, T] through (shape-checked)."""
    if advantages.dim() == 1 and advantages.shape[0] == like.shape[0]:
        return advantages.unsqueeze(-1).expand_as(like)
    if advantages.shape == like.shape:
        return advantages
    raise ValueError(f"advantages must be [B] or [B, T] = {tuple(like.shape)}, got {tuple(advantages.shape)}")


def sequence_log_ratio(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO's response log-ratio in its GSPO-token form (Zheng et al. 2025, arXiv 2507.18071, sec. 4).

        z_i             = (1/|y_i|) sum_t (log pi_theta(y_t) - log pi_old(y_t))   over the trained tokens of response i
        log s_{i,t}     = sg[z_i] + log pi_theta(y_t) - sg[log pi_theta(y_t)]

    The VALUE of log s_{i,t} is z_i for every token of response i, so the clip admits or drops whole responses, and its
    gradient is grad log pi_theta(y_t). Reduced with any per-response-constant weight, sum_t A_i s_i grad log pi(y_t) /
    |y_i| = A_i grad s_i: the GSPO-token objective's gradient equals GSPO's for one scalar advantage per response.
    The log-ratio is clamped from above at ``SEQUENCE_LOG_RATIO_MAX`` only (verl), which also stops its gradient there.

    Returns: (log_ratio [B, T] carrying the gradient, z [B] detached). Empty responses get z = 0.
    """
    mask = response_mask.bool()
    diff = torch.where(mask, logprobs.detach() - old_logprobs.detach(), 0.0)
    z = diff.sum(-1) / mask.sum(-1).clamp(min=1)
    log_ratio = z.unsqueeze(-1) + (logprobs - logprobs.detach())
    return torch.clamp(log_ratio, max=SEQUENCE_LOG_RATIO_MAX), z


def _check_constant_per_sequence(advantages: torch.Tensor, mask: torch.Tensor) -> None:
    big = torch.finfo(advantages.dtype).max
    hi = torch.where(mask, advantages, -big).amax(-1)
    lo = torch.where(mask, advantages, big).amin(-1)
    varies = mask.any(-1) & (hi != lo)
    if bool(varies.any()):
        raise ValueError(
            "importance_sampling_level='sequence' scores one ratio per response and so needs one advantage per "
            f"response, but {int(varies.sum())} response(s) carry per-token advantages that vary; pass [B] "
            "advantages or use importance_sampling_level='token'"
        )


def clipped_policy_terms(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    lower_bound_ratio: float = 0.0,
    importance_sampling_level: ImportanceSamplingLevel = "token",
) -> tuple[torch.Tensor, PolicyLossStats]:
    """Per-token clipped-surrogate losses [B, T] (0 where masked out) and diagnostics; see ``clipped_policy_loss``.

    Exposed for callers that reduce across micro-batches with ``LossAccumulator`` or add per-token terms (KL, score
    centering) before reducing.
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != response_mask.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must all be [B, T]"
        )
    if lower_bound_ratio < 0 or 0 < lower_bound_ratio <= 1:
        raise ValueError(
            f"lower_bound_ratio must be 0 (dual clip off) or > 1 (Ye et al. 2020), got {lower_bound_ratio}"
        )
    mask = response_mask.bool()
    adv = token_advantages(advantages, logprobs).detach()
    token_log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), 0.0)

    if importance_sampling_level == "sequence":
        if lower_bound_ratio != 0:
            raise ValueError(
                "lower_bound_ratio must be 0 under importance_sampling_level='sequence': the response ratio has no "
                f"dual clip (got {lower_bound_ratio})"
            )
        _check_constant_per_sequence(adv, mask)
        log_ratio, z = sequence_log_ratio(logprobs, old_logprobs, mask)
    elif importance_sampling_level == "token":
        log_ratio = torch.clamp(token_log_ratio, -TOKEN_LOG_RATIO_CLAMP, TOKEN_LOG_RATIO_CLAMP)
        z = masked_mean(token_log_ratio.detach(), mask, dim=-1)
    else:
        raise ValueError(f"importance_sampling_level must be 'token' or 'sequence', got {importance_sampling_level!r}")

    ratio = torch.exp(log_ratio)
    # PPO (Schulman et al. 2017, eq. 7): L = -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) = max(-r A, -clip(r) A).
    # A negative epsilon removes that bound (DAPO's clip-higher decouples the two; arXiv 2503.14476 sec. 3.1).
    low = 1.0 - epsilon_low if epsilon_low >= 0 else None
    high = 1.0 + epsilon_high if epsilon_high >= 0 else None
    clipped_ratio = ratio if low is None and high is None else torch.clamp(ratio, min=low, max=high)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * clipped_ratio
    loss_mat = torch.maximum(loss_unclipped, loss_clipped)
    clipped = loss_clipped > loss_unclipped
    dual = torch.zeros_like(mask)
    if lower_bound_ratio > 0:
        # Dual clip (Ye et al. 2020, arXiv 1912.09729): for A < 0 the PPO loss -A r grows without bound in r; cap it at
        # -A c, i.e. loss = min(max(-A r, -A clip(r)), -A c). A >= 0 is untouched.
        cap = -adv * lower_bound_ratio
        dual = (adv < 0) & (cap < loss_mat)
        loss_mat = torch.where(dual, cap, loss_mat)
        clipped = clipped | dual
    loss_mat = torch.where(mask, loss_mat, 0.0)

    with torch.no_grad():
        valid = mask.any(-1)
        n_valid = valid.sum().clamp(min=1)
        # KL diagnostics stay per token at both levels: k3 = (r - 1) - log r >= 0 on each token's own ratio.
        token_lr = token_log_ratio.detach().clamp(-TOKEN_LOG_RATIO_CLAMP, TOKEN_LOG_RATIO_CLAMP)
        token_kl = torch.exp(token_lr) - 1 - token_lr
        stats = PolicyLossStats(
            clip_frac=masked_mean(clipped.to(logprobs.dtype), mask),
            dual_clip_frac=masked_mean(dual.to(logprobs.dtype), mask),
            ratio_absdev=masked_mean((ratio.detach() - 1).abs(), mask),
            seq_clip_frac=(clipped & mask).any(-1).sum().to(logprobs.dtype) / n_valid,
            seq_log_ratio_abs=masked_sum(z.abs(), valid) / n_valid,
            valid_sequence_count=valid.sum().to(logprobs.dtype),
            approx_kl=masked_mean(token_kl, mask),
        )
    return loss_mat, stats


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    lower_bound_ratio: float = 0.0,
    importance_sampling_level: ImportanceSamplingLevel = "token",
    loss_type: LossType = "token-mean",
    max_tokens: int | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """The clipped policy-gradient surrogate of PPO / GRPO / DAPO / GSPO, reduced to a scalar loss.

    Token level (PPO, Schulman et al. 2017, eq. 7; GRPO, Shao et al. 2024, eq. 3):
        r_t = exp(log pi_theta(y_t) - log pi_old(y_t))            (log-ratio clamped to +-20)
        l_t = max(-A_t r_t, -A_t clip(r_t, 1 - epsilon_low, 1 + epsilon_high))
        A_t < 0 and lower_bound_ratio = c > 1:  l_t = min(l_t, -A_t c)     (dual clip, Ye et al. 2020)
    Sequence level (GSPO, Zheng et al. 2025, arXiv 2507.18071): every token of response i uses the response ratio
        s_i = exp(z_i), z_i = mean_t (log pi_theta - log pi_old), in the GSPO-token form (``sequence_log_ratio``),
        with no dual clip (``lower_bound_ratio != 0`` -> ValueError) and one advantage per response (advantages that
        vary within a response -> ValueError).

    Args:
        logprobs: [B, T] log pi_theta of the sampled tokens (with gradient).
        old_logprobs: [B, T] log pi_old, the behaviour policy (no gradient).
        advantages: [B, T] or [B].
        response_mask: [B, T] bool, True = trained token.
        epsilon_low / epsilon_high: clip bounds; a negative value disables that side.
        lower_bound_ratio: dual-clip bound c (0 disables; otherwise must exceed 1).
        importance_sampling_level: "token" or "sequence".
        loss_type / max_tokens: the reduction (``aggregate_loss``).

    Returns:
        (loss, PolicyLossStats). With pi_theta == pi_old every ratio is exactly 1 and clip_frac is 0.
    """
    loss_mat, stats = clipped_policy_terms(
        logprobs,
        old_logprobs,
        advantages,
        response_mask,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        lower_bound_ratio=lower_bound_ratio,
        importance_sampling_level=importance_sampling_level,
    )
    return aggregate_loss(loss_mat, response_mask, loss_type, max_tokens), stats


def legacy_pg_loss(
    logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_type: LossType = "token-mean",
    max_tokens: int | None = None,
) -> torch.Tensor:
    """Plain REINFORCE surrogate (Williams 1992): l_t = -A_t log pi_theta(y_t), reduced with ``loss_type``.

    Its gradient, -A_t grad log pi_theta(y_t), is the on-policy policy gradient; there is no ratio, so it is only
    correct when the samples come from the current policy.
    Shapes: logprobs [B, T], advantages [B, T] or [B], mask [B, T].
    """
    adv = token_advantages(advantages, logprobs).detach()
    loss_mat = torch.where(response_mask.bool(), -adv * logprobs, 0.0)
    return aggregate_loss(loss_mat, response_mask, loss_type, max_tokens)
