"""Dynamic sampling (DAPO, Yu et al. 2025, arXiv 2503.14476, sec. 3.2): informative-group gate, quota and assembly.

A group whose rewards all tie has zero group advantage for every member, so it contributes no policy gradient (only
the KL term, if any) while still occupying batch slots and the loss divisor. DAPO keeps sampling until the batch holds
enough groups with a reward spread. These helpers hold the arithmetic; the collection loop owns the sampling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import torch


def informative_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Which groups have a reward spread (max - min > 0).

    Args:
        rewards: [B]; group_ids: [B] long.

    Returns:
        [num_groups] bool, ordered like ``torch.unique(group_ids)`` (ascending group id). A singleton group is never
        informative (its advantage is 0).
    """
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(f"expected [B] rewards and group_ids, got {tuple(rewards.shape)}, {tuple(group_ids.shape)}")
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    r = rewards.detach().to(torch.promote_types(rewards.dtype, torch.float32))
    high = torch.full((num_groups,), -math.inf, dtype=r.dtype, device=r.device).scatter_reduce(
        0, inverse, r, reduce="amax"
    )
    low = torch.full((num_groups,), math.inf, dtype=r.dtype, device=r.device).scatter_reduce(
        0, inverse, r, reduce="amin"
    )
    return high > low


def informative_quota(
    groups_per_step: int,
    min_informative_groups: int = 0,
    min_informative_groups_frac: float | None = None,
) -> int:
    """The informative-group quota of one step (``effective_min_informative_groups``); 0 means dynamic sampling off.

        literal:   quota = min_informative_groups
        fraction:  quota = max(1, ceil(Fraction(frac).limit_denominator(10**6) * groups_per_step))

    The fraction is read as the nearest rational with denominator <= 10^6 before the ceil, so a share naming a whole
    number of groups is exactly that number: 0.14 of 50 is 7 (the float product 7.000000000000001 would ceil to 8).

    Raises ValueError when both knobs are set, when the fraction is outside (0, 1], or when the literal count exceeds
    ``groups_per_step`` (batch_per_replica // group_size).
    """
    if groups_per_step < 1:
        raise ValueError(f"groups_per_step must be >= 1, got {groups_per_step}")
    if min_informative_groups < 0:
        raise ValueError(f"min_informative_groups must be >= 0, got {min_informative_groups}")
    if min_informative_groups_frac is not None:
        if min_informative_groups > 0:
            raise ValueError(
                "set either min_informative_groups or min_informative_groups_frac, not both "
                f"(got {min_informative_groups} and {min_informative_groups_frac}); leave the literal at 0"
            )
        if not 0 < min_informative_groups_frac <= 1:
            raise ValueError(f"min_informative_groups_frac must be in (0, 1], got {min_informative_groups_frac}")
        share = Fraction(min_informative_groups_frac).limit_denominator(10**6)
        return max(1, math.ceil(share * groups_per_step))
    if min_informative_groups > groups_per_step:
        raise ValueError(
            f"min_informative_groups={min_informative_groups} exceeds groups_per_step={groups_per_step} "
            "(batch_per_replica // group_size): the batch cannot hold that many groups"
        )
    return min_informative_groups


def assemble_groups(informative: Sequence[bool] | torch.Tensor, capacity: int) -> list[int]:
    """Informative-first batch assembly: choose up to ``capacity`` candidate groups.

    Informative groups come first in arrival order, then tied groups in arrival order fill the remainder (zero-advantage
    filler keeps the batch shape; full DAPO sets the quota equal to the capacity so no filler is needed). The order is
    deterministic: it depends only on the arrival order.

    Args:
        informative: one flag per candidate group, in arrival order.
        capacity: groups per batch (batch_per_replica // group_size).

    Returns:
        Indices into ``informative`` of the chosen groups, informative ones first.
    """
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    flags = [bool(f) for f in (informative.tolist() if isinstance(informative, torch.Tensor) else informative)]
    first = [i for i, f in enumerate(flags) if f]
    filler = [i for i, f in enumerate(flags) if not f]
    return (first + filler)[:capacity]


def split_quota(quota: int, cell_capacities: Sequence[int]) -> list[int]:
    """Split a global quota exactly across data cells, proportionally to each cell's group capacity.

    Largest-remainder (Hamilton) apportionment in exact rational arithmetic: each cell gets
    floor(quota * c_i / sum c), and the leftover units go to the largest fractional parts, ties to the lower cell index.
    The shares sum to ``quota`` exactly, never exceed a cell's capacity, and are a pure function of the inputs (equal
    capacities -> quota // n each, the first quota % n cells one more).

    Raises ValueError when the quota exceeds the total capacity or a capacity is negative.
    """
    if quota < 0 or any(c < 0 for c in cell_capacities):
        raise ValueError(f"quota and capacities must be non-negative, got {quota} and {list(cell_capacities)}")
    total = sum(cell_capacities)
    if quota > total:
        raise ValueError(f"quota {quota} exceeds the cells' total capacity {total}")
    if quota == 0:
        return [0] * len(cell_capacities)
    exact = [Fraction(quota * c, total) for c in cell_capacities]
    shares = [math.floor(x) for x in exact]
    leftover = quota - sum(shares)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in order[:leftover]:
        shares[i] += 1
    return shares
