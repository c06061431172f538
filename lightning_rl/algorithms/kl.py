"""Per-token estimators of KL(pi_theta || pi_ref) from sampled-token log-probabilities (Schulman 2020,
"Approximating KL Divergence", http://joschu.net/blog/kl-approx.html).

With tokens sampled from pi_theta and log-ratio x = log pi_theta(y) - log pi_ref(y) (= -z):
    k1 = x                         unbiased, high variance, can be negative
    k2 = 0.5 x^2                   biased, low variance, >= 0
    k3 = exp(z) - z - 1            unbiased, low variance, >= 0   (z = log pi_ref - log pi_theta; DeepSeekMath eq. 4)
All tensors are [B, T]; the caller masks and reduces.
"""

from __future__ import annotations

import torch

from lightning_rl.algorithms.reduction import masked_mean

# |z| is clamped at this many nats before exp (the spec's bound for kl_beta's k3): exp(20) ~ 4.9e8.
K3_LOG_RATIO_CLAMP = 20.0


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log pi_theta - log pi_ref, [B, T]."""
    return logprobs - ref_logprobs


def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 (log pi_theta - log pi_ref)^2, [B, T]."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = exp(z) - z - 1, z = clamp(log pi_ref - log pi_theta, -20, 20), [B, T]; the exact-gradient ``k3_kl``."""
    return k3_kl(logprobs, ref_logprobs)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, clamp: float | None = None) -> torch.Tensor:
    """The k3 penalty of ``rl.kl_beta`` with the optional ``rl.kl_coeff_clamp`` gradient bound, [B, T].

    Value: k3 = exp(z) - z - 1 with z = clamp(log pi_ref - log pi_theta, -20, 20), always exact.

    Gradient w.r.t. log pi_theta: dk3/dlogp = (exp(z) - 1) * dz/dlogp = 1 - exp(z); this is the gradient of
    KL(pi_ref || pi_theta) under the sampled estimate (the DeepSeekMath convention), and it is unbounded below
    (-4.85e8 just inside the +-20 clamp). With ``clamp = c`` in (0, 20) the gradient becomes that of k3's linear
    extension beyond |z| = c, i.e. the coefficient 1 - exp(clamp(z, -c, c)) (magnitude <= exp(c) - 1), applied by the
    straight-through identity  value = sg[k3] + sg[coef] * (z_logp - sg[z_logp])  where z_logp = -z carries the
    gradient. Beyond the +-20 clamp the gradient is 0 in both forms (z is constant there).

    Args:
        logprobs: [B, T] log pi_theta (with gradient); ref_logprobs: [B, T] log pi_ref (treated as a constant).
        clamp: None (exact gradient) or c with 0 < c < 20.
    """
    if clamp is not None and not (0 < clamp < K3_LOG_RATIO_CLAMP):
        raise ValueError(
            f"kl_coeff_clamp must be in (0, {K3_LOG_RATIO_CLAMP:g}) nats or None, got {clamp}: the +-20 log-ratio "
            "clamp already zeroes the gradient beyond 20, so a larger bound would be inert"
        )
    z = torch.clamp(ref_logprobs.detach() - logprobs, -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
    k3 = torch.exp(z) - z - 1
    if clamp is None:
        return k3
    with torch.no_grad():
        coef = 1 - torch.exp(torch.clamp(z, -clamp, clamp))
    # -z equals logp - ref inside the +-20 band and has zero gradient outside it, like the exact form.
    minus_z = -z
    return k3.detach() + coef * (minus_z - minus_z.detach())


def kl_stats(kl: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(token-weighted mean, max) of a per-token KL [B, T] over ``response_mask``, detached; both 0 on an empty mask."""
    kl = kl.detach()
    mask = response_mask.bool()
    mean = masked_mean(kl, mask)
    # No host sync: take the max over -inf-filled positions and map the empty case to 0.
    largest = torch.where(mask, kl, float("-inf")).amax()
    return mean, torch.where(mask.any(), largest, torch.zeros((), dtype=kl.dtype, device=kl.device))
