"""Advantage estimators: GAE for PPO's critic, group-relative advantages for the GRPO family.

Shapes follow ``lightning_rl.types``: [B, T] per-token tensors aligned with the response tokens, [B] per-sequence.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation (Schulman et al. 2016, arXiv 1506.02438, eq. 16).

        delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)
        A_t     = sum_l (gamma * lam)^l delta_{t+l}  =  delta_t + gamma * lam * A_{t+1}
        R_t     = A_t + V(s_t)   (the lambda-return, the critic's regression target)

    Args:
        token_rewards: [B, T] reward received after response token t (KL-shaped rewards included by the caller).
        values: [B, T] V(s_t), the critic's value of the state before response token t.
        response_mask: [B, T] bool, True on the tokens that are trained on.
        gamma: discount per token; lam: GAE lambda.

    Returns:
        (advantages, returns), both [B, T], 0 on masked-out positions, without gradient.

    The recursion runs backwards over the masked tokens only: a masked-out position is skipped (it neither receives an
    advantage nor breaks the chain), so the "next state" of a token is the next *trained* token. The value after the
    last trained token is 0: the response ends the episode, so delta_last = r_last - V_last.
    """
    if not (token_rewards.shape == values.shape == response_mask.shape) or values.dim() != 2:
        raise ValueError(
            f"gae expects [B, T] token_rewards/values/response_mask of one shape, got {tuple(token_rewards.shape)}, "
            f"{tuple(values.shape)}, {tuple(response_mask.shape)}"
        )
    mask = response_mask.bool()
    dtype = torch.promote_types(token_rewards.dtype, values.dtype)
    rewards = token_rewards.detach().to(dtype)
    values = values.detach().to(dtype)
    batch, length = values.shape
    advantages = torch.zeros_like(values)
    next_value = values.new_zeros(batch)  # V(s_{T}) = 0: terminal state after the last response token
    next_advantage = values.new_zeros(batch)  # A_{T} = 0
    for t in reversed(range(length)):
        valid = mask[:, t]
        # delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        # A_t = delta_t + gamma * lam * A_{t+1}
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = torch.where(valid, advantage, 0.0)
        # Only a trained token becomes the successor of the tokens before it.
        next_value = torch.where(valid, values[:, t], next_value)
        next_advantage = torch.where(valid, advantage, next_advantage)
    returns = torch.where(mask, advantages + values, 0.0)
    return advantages, returns


@torch.no_grad()
def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    unbiased: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-relative advantages of GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300, sec. 4.1.2).

        A_i = (r_i - mean_g(r)) / (std_g(r) + eps)      unbiased=False (GRPO)
        A_i =  r_i - mean_g(r)                           unbiased=True  (Dr-GRPO, Liu et al. 2025, arXiv 2503.20783)

    ``unbiased`` names the Dr-GRPO knob (``rl.unbiased_advantage``), not the std estimator: the std is always the
    Bessel-corrected sample std (``torch.std``'s default, as verl), so a group of two rewards {0, 1} gets +-0.7071.

    Args:
        rewards: [B] scalar episode rewards.
        group_ids: [B] long, the prompt each completion answers; members of a group need not be contiguous.

    Returns:
        [B] advantages (no gradient). A group of size 1 has no baseline and gets advantage 0; a tied group gets 0.
    """
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(f"expected [B] rewards and group_ids, got {tuple(rewards.shape)}, {tuple(group_ids.shape)}")
    r = rewards.detach().to(torch.promote_types(rewards.dtype, torch.float32))
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    num_groups = counts.numel()
    mean = r.new_zeros(num_groups).index_add_(0, inverse, r) / counts
    centered = r - mean[inverse]
    if unbiased:
        advantages = centered
    else:
        # Sample variance: sum (r - mean)^2 / (n - 1); a singleton's divisor is clamped (its advantage is zeroed below).
        sq = r.new_zeros(num_groups).index_add_(0, inverse, centered**2)
        std = torch.sqrt(sq / (counts - 1).clamp(min=1))
        advantages = centered / (std[inverse] + eps)
    return torch.where(counts[inverse] > 1, advantages, 0.0)
