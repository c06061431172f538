"""Direct Preference Optimization (Rafailov et al. 2023, arXiv 2305.18290)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lightning_rl.algorithms.reduction import masked_sum


@dataclass(frozen=True)
class DPOStats:
    """Detached batch means (0-dim): implicit rewards beta * log(pi/pi_ref) of the chosen and rejected responses, their
    margin, and the fraction of pairs whose chosen reward is strictly larger."""

    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor
    margin: torch.Tensor
    accuracy: torch.Tensor


def sequence_logprobs(token_logprobs: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """log pi(y | x) = sum of the response's token log-probabilities: [B, T] -> [B]."""
    return masked_sum(token_logprobs, response_mask, dim=-1)


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, DPOStats]:
    """The sigmoid DPO loss (Rafailov et al. 2023, eq. 7):

        L = -E[ log sigmoid( beta * (log pi(y_w)/pi_ref(y_w) - log pi(y_l)/pi_ref(y_l)) ) ]

    Derived from the Bradley-Terry preference model with the reward reparameterised as r = beta log(pi / pi_ref)
    (eq. 5), which cancels the partition function in the difference. ``label_smoothing`` = eps gives the conservative
    DPO variant (Mitchell 2023): (1 - eps) * L(h) + eps * L(-h), for labels flipped with probability eps.

    Args:
        policy_chosen_logps / policy_rejected_logps: [B] sequence log-probabilities under pi (with gradient).
        ref_chosen_logps / ref_rejected_logps: [B] under the frozen reference.
        beta: the KL-regularisation strength (> 0).

    Returns:
        (mean loss over the batch, DPOStats).
    """
    if beta <= 0:
        raise ValueError(f"DPO beta must be > 0, got {beta}")
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    chosen_logratio = policy_chosen_logps - ref_chosen_logps.detach()
    rejected_logratio = policy_rejected_logps - ref_rejected_logps.detach()
    logits = beta * (chosen_logratio - rejected_logratio)
    # -log sigmoid(h) via logsigmoid: stable for large |h|.
    losses = -(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)
    with torch.no_grad():
        chosen_rewards = beta * chosen_logratio.detach()
        rejected_rewards = beta * rejected_logratio.detach()
        stats = DPOStats(
            chosen_rewards=chosen_rewards.mean(),
            rejected_rewards=rejected_rewards.mean(),
            margin=(chosen_rewards - rejected_rewards).mean(),
            accuracy=(chosen_rewards > rejected_rewards).to(chosen_rewards.dtype).mean(),
        )
    return losses.mean(), stats
