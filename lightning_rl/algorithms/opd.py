"""On-policy distillation: same-token divergence between student and teacher over the teacher's top-k support.

GKD (Agarwal et al. 2024, "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes",
arXiv 2306.13649, sec. 3) trains the student on its own samples against the teacher's per-token distribution with the
generalised Jensen-Shannon divergence
    JSD(beta)(T || S) = beta KL(T || M) + (1 - beta) KL(S || M),   M = beta T + (1 - beta) S,
whose limits are proportional to forward KL(T || S) as beta -> 0 and reverse KL(S || T) as beta -> 1. As in GKD's
reference implementation (TRL's ``generalized_jsd_loss``), the endpoints use the KLs themselves:
    jsd_beta = 0: KL(teacher || student)  (mode covering)    jsd_beta = 1: KL(student || teacher)  (mode seeking)
"""

from __future__ import annotations

import math

import torch

# Stand-in for log 0 on padded top-k slots: finite (so no inf - inf or 0 * inf reaches a backward pass) and far below
# any real log-probability, so exp() of it, renormalised or not, is exactly 0 in every float dtype.
_LOG_ZERO = -1.0e4


def _kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) = sum_v P_v (log P_v - log Q_v) over the last dim; entries with P_v = 0 contribute 0."""
    p = log_p.exp()
    diff = torch.where(p > 0, log_p - log_q, torch.zeros((), dtype=log_p.dtype, device=log_p.device))
    return (p * diff).sum(-1)


def opd_divergence(
    student_topk_logprobs: torch.Tensor,
    teacher_topk_logprobs: torch.Tensor,
    jsd_beta: float = 1.0,
    *,
    renormalize: bool = True,
) -> torch.Tensor:
    """Per-token divergence between student and teacher on the teacher's top-k support S_t (``rl.jsd_beta``).

    Args:
        student_topk_logprobs: [B, T, K] student log-probabilities at the teacher's top-k ids (with gradient;
            ``token_logprobs(logits, teacher_topk_ids)``).
        teacher_topk_logprobs: [B, T, K] the teacher's log-probabilities there (a constant). A non-finite entry marks
            a padded slot: it is removed from the support of both distributions.
        jsd_beta: 0 = forward KL(teacher || student), 1 = reverse KL(student || teacher), in between the generalised
            JSD above.
        renormalize: restrict both distributions to S_t and renormalise them there (log_softmax over the K entries), so
            every divergence is between proper distributions and is >= 0, and vanishes iff they agree on S_t.
            False uses the raw sub-distributions (the KL sums then run over S_t only).

    Returns:
        [B, T] divergence per token; mask and reduce with ``aggregate_loss``.
    """
    if not 0.0 <= jsd_beta <= 1.0:
        raise ValueError(f"jsd_beta must be in [0, 1], got {jsd_beta}")
    if student_topk_logprobs.shape != teacher_topk_logprobs.shape or student_topk_logprobs.dim() != 3:
        raise ValueError(
            f"expected [B, T, K] student and teacher top-k logprobs, got {tuple(student_topk_logprobs.shape)} and "
            f"{tuple(teacher_topk_logprobs.shape)}"
        )
    teacher = teacher_topk_logprobs.detach().to(student_topk_logprobs.dtype)
    support = torch.isfinite(teacher)
    student = torch.where(support, student_topk_logprobs, _LOG_ZERO)
    teacher = torch.where(support, teacher, _LOG_ZERO)
    if renormalize:
        student = torch.log_softmax(student, dim=-1)
        teacher = torch.log_softmax(teacher, dim=-1)
    if jsd_beta == 0.0:
        return _kl(teacher, student)
    if jsd_beta == 1.0:
        return _kl(student, teacher)
    # log M = log(beta T + (1 - beta) S), in log space for stability.
    log_mixture = torch.logsumexp(torch.stack([teacher + math.log(jsd_beta), student + math.log(1 - jsd_beta)]), dim=0)
    return jsd_beta * _kl(teacher, log_mixture) + (1 - jsd_beta) * _kl(student, log_mixture)
