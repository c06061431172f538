"""Per-token log-probabilities and entropies from logits.

Logits are [B, T, V] and already aligned with the response tokens (the caller drops the prompt positions and shifts by
one, so ``logits[b, t]`` predicts ``response_ids[b, t]``).
"""

from __future__ import annotations

import torch


def _scaled(logits: torch.Tensor, temperature: float, dtype: torch.dtype) -> torch.Tensor:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (got {temperature}); greedy decoding has no log-probabilities")
    scaled = logits.to(dtype)
    # The sampler draws from softmax(logits / temperature); scoring under any other temperature scores another policy.
    return scaled if temperature == 1.0 else scaled / temperature


def token_logprobs(
    logits: torch.Tensor,
    token_ids: torch.Tensor,
    temperature: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """log softmax(logits / temperature)[token] computed in ``dtype``.

    Args:
        logits: [B, T, V] in any dtype (bf16 model outputs are upcast before the softmax: a bf16 log_softmax loses about
            three significant digits, which shows up directly in the importance ratio).
        token_ids: [B, T] the sampled tokens -> returns [B, T]; or [B, T, K] (e.g. a sampler's or teacher's top-k ids)
            -> returns [B, T, K].
        temperature: the sampling temperature (> 0).
        dtype: the dtype of the softmax (``rl.logprob_dtype``).
    """
    logp = torch.log_softmax(_scaled(logits, temperature, dtype), dim=-1)
    ids = token_ids.long()
    if ids.dim() == logits.dim() - 1:
        return logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    if ids.dim() == logits.dim():
        return logp.gather(-1, ids)
    raise ValueError(f"token_ids must be [B, T] or [B, T, K] for logits {tuple(logits.shape)}, got {tuple(ids.shape)}")


def entropy_from_logits(
    logits: torch.Tensor,
    temperature: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Entropy H = -sum_v p_v log p_v of softmax(logits / temperature), [B, T, V] -> [B, T], in ``dtype``.

    Tokens with p_v = 0 (logit -inf, e.g. a masked vocabulary) contribute 0 (the limit of p log p), not NaN, in the
    value and in the gradient (log p is zeroed BEFORE the product, so no 0 * -inf appears in the backward either).
    """
    logp = torch.log_softmax(_scaled(logits, temperature, dtype), dim=-1)
    p = logp.exp()
    safe_logp = torch.where(p > 0, logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
    return -(p * safe_logp).sum(-1)
