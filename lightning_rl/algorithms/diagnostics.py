"""Diagnostics of the train/infer mismatch (``train/logprob_gap_*``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lightning_rl.algorithms.reduction import masked_mean


@dataclass(frozen=True)
class LogprobGapStats:
    """Detached 0-dim statistics of d = trainer_logprobs - rollout_logprobs over the trained tokens.

    mean: E[d] (a systematic offset, e.g. a temperature mismatch); abs_mean: E[|d|] (the typical per-token gap);
    max_abs: max |d| (one bad token can dominate an importance ratio). All 0 on an empty mask.
    """

    mean: torch.Tensor
    abs_mean: torch.Tensor
    max_abs: torch.Tensor


def logprob_gap_stats(
    trainer_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, response_mask: torch.Tensor
) -> LogprobGapStats:
    """Statistics of the gap between the trainer's and the rollout engine's log-probabilities of the same sampled
    tokens, [B, T] each. A large gap means the rollout's distribution is not the policy being trained (temperature or
    processed-vs-raw logprob mismatch, kernels, precision, MoE routing), so the "on-policy" ratio is off-policy.
    """
    if trainer_logprobs.shape != rollout_logprobs.shape or trainer_logprobs.shape != response_mask.shape:
        raise ValueError(
            f"trainer_logprobs {tuple(trainer_logprobs.shape)}, rollout_logprobs {tuple(rollout_logprobs.shape)} and "
            f"response_mask {tuple(response_mask.shape)} must all be [B, T]"
        )
    mask = response_mask.bool()
    with torch.no_grad():
        gap = torch.where(mask, trainer_logprobs.detach() - rollout_logprobs.detach(), 0.0)
        return LogprobGapStats(
            mean=masked_mean(gap, mask),
            abs_mean=masked_mean(gap.abs(), mask),
            max_abs=gap.abs().amax() if gap.numel() else gap.new_zeros(()),
        )
