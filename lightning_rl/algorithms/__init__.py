"""Pure tensor math for RL post-training: advantages, policy/value losses, KL estimators, loss reductions, DAPO and
dynamic-sampling helpers, score centering, DPO and on-policy distillation.

Imports torch only (never lightning, ray, vllm or transformers). Shape letters (B, G, T, V) are defined in
``lightning_rl.types``; per-token tensors are [B, T] aligned with the response tokens.
"""

from lightning_rl.algorithms.advantages import gae, group_advantages
from lightning_rl.algorithms.dapo import common_prefix_lengths, dapo_loss_mask, shared_prefix_mask
from lightning_rl.algorithms.diagnostics import LogprobGapStats, logprob_gap_stats
from lightning_rl.algorithms.dpo import DPOStats, dpo_loss, sequence_logprobs
from lightning_rl.algorithms.dynamic_sampling import (
    assemble_groups,
    informative_groups,
    informative_quota,
    split_quota,
)
from lightning_rl.algorithms.kl import k3_kl, kl_k1, kl_k2, kl_k3, kl_stats
from lightning_rl.algorithms.logprobs import entropy_from_logits, token_logprobs
from lightning_rl.algorithms.opd import opd_divergence
from lightning_rl.algorithms.policy_loss import (
    ImportanceSamplingLevel,
    PolicyLossStats,
    clipped_policy_loss,
    clipped_policy_terms,
    legacy_pg_loss,
    sequence_log_ratio,
    token_advantages,
)
from lightning_rl.algorithms.reduction import (
    LOSS_TYPES,
    LossAccumulator,
    LossType,
    aggregate_loss,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from lightning_rl.algorithms.score_centering import ScoreCenteringCompose, ScoreCenteringStats, score_centering_loss
from lightning_rl.algorithms.value_loss import clipped_value_loss, clipped_value_terms

__all__ = [
    "LOSS_TYPES",
    "DPOStats",
    "ImportanceSamplingLevel",
    "LogprobGapStats",
    "LossAccumulator",
    "LossType",
    "PolicyLossStats",
    "ScoreCenteringCompose",
    "ScoreCenteringStats",
    "aggregate_loss",
    "assemble_groups",
    "clipped_policy_loss",
    "clipped_policy_terms",
    "clipped_value_loss",
    "clipped_value_terms",
    "common_prefix_lengths",
    "dapo_loss_mask",
    "dpo_loss",
    "entropy_from_logits",
    "gae",
    "group_advantages",
    "informative_groups",
    "informative_quota",
    "k3_kl",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_stats",
    "legacy_pg_loss",
    "logprob_gap_stats",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "opd_divergence",
    "score_centering_loss",
    "sequence_log_ratio",
    "sequence_logprobs",
    "shared_prefix_mask",
    "split_quota",
    "token_advantages",
    "token_logprobs",
]
