"""The per-token process (shaping) term, kept separate from the terminal reward.

``linear``: the terminal score s_b of sequence b is spread over its trained response tokens with weights that grow
linearly with position. With p = 1..L_b the position of a token among the L_b trained tokens of sequence b,

    r_{b,t} = s_b * p / (L_b (L_b + 1) / 2)        on trained tokens,  0 elsewhere,

so sum_t r_{b,t} = s_b (the term redistributes the episode's reward, it does not add a second one), the first token
gets 2 s_b / (L_b (L_b + 1)) and the last 2 s_b / (L_b + 1): credit grows toward the answer. A sequence with no trained
token gets zeros. ``none``: zeros.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_rl.errors import ConfigError
from lightning_rl.rewards.config import KEY

if TYPE_CHECKING:
    import torch


def process_rewards(process: str, scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-token shaping rewards [B, T] from terminal ``scores`` [B] and ``response_mask`` [B, T] (True = trained).

    The result has ``scores``' floating dtype (float32 for integer scores) and device; see the module docstring for
    the ``linear`` formula.
    """
    import torch

    if scores.dim() != 1 or response_mask.dim() != 2 or response_mask.shape[0] != scores.shape[0]:
        raise ValueError(
            f"process_rewards: expected scores [B] and response_mask [B, T], got "
            f"{tuple(scores.shape)} and {tuple(response_mask.shape)}"
        )
    dtype = scores.dtype if scores.is_floating_point() else torch.float32
    if process == "none":
        return torch.zeros(response_mask.shape, dtype=dtype, device=scores.device)
    if process != "linear":
        raise ConfigError(f"{KEY}.process={process!r}: expected one of linear, none")
    mask = response_mask.bool()
    position = mask.cumsum(dim=-1).to(dtype)  # p: 1..L_b on trained tokens (counts skip untrained ones)
    length = mask.sum(dim=-1, keepdim=True).to(dtype)  # L_b
    triangle = (length * (length + 1) / 2).clamp_min(1)  # sum_{p=1..L} p; clamped so L = 0 divides by 1, not 0
    weights = torch.where(mask, position / triangle, torch.zeros((), dtype=dtype, device=scores.device))
    return scores.to(dtype).unsqueeze(-1) * weights
