"""Score centering of the policy gradient under the SAMPLER's distribution (``rl.score_centering.*``).

Setting. Tokens are drawn from the sampler q (the rollout engine's processed, tempered distribution), which can differ
from the trainer's policy p (numerics, kernels, quantisation). With y ~ q and a per-token surrogate weight f, the policy
gradient's ascent direction is A f(p_y/q_y) grad log p_y, whose expectation for an advantage A that does not depend on y
is the DRIFT
    D = sum_v q_v f(p_v/q_v) grad log p_v,
nonzero unless q f(p/q) is proportional to p (E_p[grad log p] = 0 is the only free identity). D is a bias that moves
the policy even when every completion is equally good.

Estimating D from the sampler's top-k. Only the head H (the sampler's top-k ids, with q_v, and the policy's p_v there)
is known. On the tail assume the sampler/policy ratio is constant, q_v = rho p_v with rho = q_tail / p_tail, where
q_tail = 1 - sum_H q_v and p_tail = 1 - sum_H p_v. Then the tail's share of D is
    sum_{v not in H} rho p_v f(1/rho) grad log p_v = alpha sum_{v not in H} p_v grad log p_v
                                                 = -alpha sum_{v in H} p_v grad log p_v,     alpha = rho f(1/rho),
using sum_all p_v grad log p_v = grad sum_v p_v = 0. Hence
    D = sum_{v in H} (q_v w_v - alpha p_v) grad log p_v,     w_v = f(p_v / q_v) for v in H,
and adding A * sum_{v in H} sg[q_v w_v - alpha p_v] log p_v to the per-token LOSS (whose gradient is the negated
ascent direction) cancels D in expectation; the surrogate itself is scaled by sg[f(p_y/q_y)].

f by ``compose``: none f(r) = 1 (pure centering, surrogate weight exactly 1); tis f(r) = min(r, tis_clip) (truncated IS,
Ionides 2008 / Yao et al. 2025 "Your efficient RL framework secretly brings you off-policy RL training"); mis
f(r) = r * 1[mis_low <= r <= mis_high] (masked IS). With q == p every w_v = f(1), rho = 1, alpha = f(1), so each
coefficient q_v f(1) - f(1) p_v is exactly 0 and (for f(1) = 1) the loss is bit-identical to the uncorrected one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from lightning_rl.algorithms.policy_loss import token_advantages
from lightning_rl.algorithms.reduction import masked_mean

ScoreCenteringCompose = Literal["none", "tis", "mis"]


@dataclass(frozen=True)
class ScoreCenteringStats:
    """Detached token-weighted diagnostics (0-dim): the ``train/sc_*`` family.

    weight_mean: mean surrogate weight f(p_y/q_y). weight_zero_frac: tokens whose weight is 0 (mis rejections).
    rho_mean / alpha_mean: tail ratio and tail coefficient. head_mass_gap: mean |sum_H q - sum_H p|.
    degenerate_tail_frac: tokens where the policy's tail mass is 0 but the sampler's is not (no tail correction).
    """

    weight_mean: torch.Tensor
    weight_zero_frac: torch.Tensor
    rho_mean: torch.Tensor
    alpha_mean: torch.Tensor
    head_mass_gap: torch.Tensor
    degenerate_tail_frac: torch.Tensor


def _weight(
    ratio: torch.Tensor, compose: ScoreCenteringCompose, tis_clip: float, mis_low: float, mis_high: float
) -> torch.Tensor:
    """f(r) elementwise; r = p / q >= 0."""
    if compose == "none":
        return torch.ones_like(ratio)
    if compose == "tis":
        return torch.clamp(ratio, max=tis_clip)
    return ratio * ((ratio >= mis_low) & (ratio <= mis_high)).to(ratio.dtype)


def _check(compose: str, tis_clip: float, mis_low: float, mis_high: float) -> None:
    if compose not in ("none", "tis", "mis"):
        raise ValueError(f"score_centering.compose must be none, tis or mis, got {compose!r}")
    if compose == "tis" and not tis_clip > 0:
        raise ValueError(f"score_centering.tis_clip must be > 0, got {tis_clip}")
    if compose == "mis" and not 0 <= mis_low <= mis_high:
        raise ValueError(f"score_centering needs 0 <= mis_low <= mis_high, got {mis_low} and {mis_high}")


def score_centering_loss(
    surrogate_loss_mat: torch.Tensor,
    policy_logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    policy_topk_logprobs: torch.Tensor,
    sampler_topk_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    compose: ScoreCenteringCompose = "none",
    tis_clip: float = 2.0,
    mis_low: float = 0.5,
    mis_high: float = 5.0,
) -> tuple[torch.Tensor, ScoreCenteringStats]:
    """Apply score centering to a per-token surrogate loss (see the module docstring for the derivation).

        l'_t = sg[f(p_{y_t} / q_{y_t})] * l_t + A_t * sum_{v in H_t} sg[q_v w_v - alpha_t p_v] log p_v
        w_v = f(p_v / q_v),  rho_t = (1 - sum_H q) / (1 - sum_H p),  alpha_t = rho_t f(1 / rho_t)

    Args:
        surrogate_loss_mat: [B, T] the clipped surrogate's per-token loss (``clipped_policy_terms``).
        policy_logprobs: [B, T] log p of the sampled tokens, tempered like the sampler (used only through sg[.]).
        sampler_logprobs: [B, T] log q of the sampled tokens (processed rollout logprobs).
        policy_topk_logprobs: [B, T, K] log p at the sampler's top-k ids, WITH gradient
            (``token_logprobs(logits, rollout_topk_ids, temperature)``).
        sampler_topk_logprobs: [B, T, K] log q at those ids (float32 or wider: a rounded head breaks q == p). A -inf
            entry marks a padded slot (fewer than K ids returned): it is left out of the head on both sides.
        advantages: [B] or [B, T]; response_mask: [B, T] bool.
        compose / tis_clip / mis_low / mis_high: the IS weight f.

    Returns:
        (loss_mat [B, T], 0 where masked out; to be reduced with ``aggregate_loss``), ScoreCenteringStats.
    """
    _check(compose, tis_clip, mis_low, mis_high)
    if policy_topk_logprobs.shape != sampler_topk_logprobs.shape or policy_topk_logprobs.shape[:2] != (
        response_mask.shape
    ):
        raise ValueError(
            f"top-k logprobs must both be [B, T, K] over response_mask {tuple(response_mask.shape)}, got "
            f"{tuple(policy_topk_logprobs.shape)} and {tuple(sampler_topk_logprobs.shape)}"
        )
    mask = response_mask.bool()
    adv = token_advantages(advantages, surrogate_loss_mat).detach()
    with torch.no_grad():
        # Coefficients in float64: the tail masses are 1 - (sum of the head), which float32 would round coarsely.
        logp_head = policy_topk_logprobs.detach().double()
        logq_head = sampler_topk_logprobs.detach().double()
        in_head = torch.isfinite(logq_head)
        q_head = torch.where(in_head, logq_head.exp(), 0.0)
        p_head = torch.where(in_head, logp_head.exp(), 0.0)
        safe_logq = torch.where(in_head, logq_head, 0.0)
        w_head = _weight(torch.exp(logp_head - safe_logq), compose, tis_clip, mis_low, mis_high)
        p_tail = (1 - p_head.sum(-1)).clamp(min=0)
        q_tail = (1 - q_head.sum(-1)).clamp(min=0)
        # rho = q_tail / p_tail; equal tails (both 0 included) give rho = 1 exactly, which q == p needs.
        degenerate = (p_tail <= 0) & (q_tail > 0)
        rho = torch.where(q_tail == p_tail, 1.0, q_tail / torch.where(p_tail > 0, p_tail, 1.0))
        rho = torch.where(degenerate, 0.0, rho)
        safe_rho = torch.where(rho > 0, rho, 1.0)
        # alpha = rho f(1/rho); its limit as rho -> 0 is 0 for every f here, and a degenerate tail gets no correction.
        alpha = torch.where(rho > 0, rho * _weight(1 / safe_rho, compose, tis_clip, mis_low, mis_high), 0.0)
        coef = torch.where(in_head, q_head * w_head - alpha.unsqueeze(-1) * p_head, 0.0)
        coef = coef.to(policy_topk_logprobs.dtype)
        token_ratio = torch.exp(policy_logprobs.detach().double() - sampler_logprobs.detach().double())
        weight = _weight(token_ratio, compose, tis_clip, mis_low, mis_high).to(surrogate_loss_mat.dtype)
        weight = torch.where(mask, weight, 1.0)
    # sum_H sg[coef_v] log p_v: the gradient flows only through log p_v, as the derivation requires.
    head_logprobs = torch.where(in_head, policy_topk_logprobs, 0.0)
    correction = adv * (coef * head_logprobs).sum(-1)
    loss_mat = torch.where(mask, weight * surrogate_loss_mat + correction, 0.0)
    with torch.no_grad():
        stats = ScoreCenteringStats(
            weight_mean=masked_mean(weight, mask),
            weight_zero_frac=masked_mean((weight == 0).to(weight.dtype), mask),
            rho_mean=masked_mean(rho, mask).to(weight.dtype),
            alpha_mean=masked_mean(alpha, mask).to(weight.dtype),
            head_mass_gap=masked_mean((q_head.sum(-1) - p_head.sum(-1)).abs(), mask).to(weight.dtype),
            degenerate_tail_frac=masked_mean(degenerate.to(weight.dtype), mask),
        )
    return loss_mat, stats
