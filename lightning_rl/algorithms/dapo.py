"""Loss masks of the DAPO family: overlong filtering and shared-prefix masking.

Both return a new ``response_mask`` [B, T] (bool, True = trained token); the losses and every reduction divisor then
simply see fewer tokens, the same exit an empty completion takes.
"""

from __future__ import annotations

import torch


def dapo_loss_mask(response_mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """Overlong filtering (``rl.mask_truncated_completions``; DAPO, Yu et al. 2025, arXiv 2503.14476, the "overlong
    filtering" of its overlong-reward-shaping section): completions cut at the token budget are removed from the loss.

    A truncated completion has no final answer, so its (usually low) reward is noise about the reasoning, not a verdict
    on it. Only the loss mask changes: the reward already entered its group's mean/std, so the kept members keep their
    full-group advantages.

    Args:
        response_mask: [B, T] bool.
        truncated: [B] bool, True where the engine stopped for length (finish_reason == "length").

    Returns:
        [B, T] bool mask with every token of a truncated completion False.
    """
    if truncated.shape != response_mask.shape[:1]:
        raise ValueError(f"truncated must be [B] = [{response_mask.shape[0]}], got {tuple(truncated.shape)}")
    return response_mask.bool() & ~truncated.bool().unsqueeze(-1)


def common_prefix_lengths(response_ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[G, T] ids and mask of G completions -> [G, G] long: the number of leading trained tokens members i and j share.

    Position t belongs to the shared prefix of (i, j) iff, for every s <= t, both masks are True and the ids agree.
    """
    mask = response_mask.bool()
    same = (response_ids.unsqueeze(1) == response_ids.unsqueeze(0)) & mask.unsqueeze(1) & mask.unsqueeze(0)
    # cumprod along T keeps 1 only while every earlier position matched: its sum is the prefix length.
    return same.long().cumprod(dim=-1).sum(dim=-1)


def shared_prefix_mask(
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    rewards: torch.Tensor,
    min_prefix_tokens: int,
) -> torch.Tensor:
    """Mask the shared prefix of group members whose rewards differ (``rl.min_filter_prefix_tokens``).

    Within one group (one prompt), two completions that begin with the same L tokens but receive different rewards
    push those L tokens in opposite directions: their group advantages have opposite sign on identical (state, action)
    pairs, so the prefix's gradient is noise that only cancels on average. For each member i let
        L_i = max over members j of the same group with r_j != r_i of LCP(i, j)
    (LCP: the longest common prefix of trained tokens). If L_i >= ``min_prefix_tokens`` the first L_i trained tokens of
    i are masked out; members whose shared prefix is shorter keep their mask, as do members of tied groups.

    Args:
        response_ids: [B, T] long; response_mask: [B, T] bool; group_ids: [B] long; rewards: [B].
        min_prefix_tokens: the minimum shared span that is masked (>= 1).

    Returns:
        [B, T] bool, a subset of ``response_mask``.
    """
    if min_prefix_tokens < 1:
        raise ValueError(f"min_filter_prefix_tokens must be >= 1, got {min_prefix_tokens}")
    if response_ids.shape != response_mask.shape or group_ids.shape != response_ids.shape[:1]:
        raise ValueError(
            f"expected [B, T] response_ids/response_mask and [B] group_ids, got {tuple(response_ids.shape)}, "
            f"{tuple(response_mask.shape)}, {tuple(group_ids.shape)}"
        )
    if rewards.shape != group_ids.shape:
        raise ValueError(f"rewards must be [B] = {tuple(group_ids.shape)}, got {tuple(rewards.shape)}")
    mask = response_mask.bool().clone()
    masked_prefix = torch.zeros(response_ids.shape[0], dtype=torch.long, device=response_ids.device)
    # One group at a time keeps the pairwise table at [G, G, T] instead of [B, B, T].
    for group in torch.unique(group_ids):
        members = (group_ids == group).nonzero(as_tuple=True)[0]
        if members.numel() < 2:
            continue
        lcp = common_prefix_lengths(response_ids[members], mask[members])
        r = rewards[members]
        differs = r.unsqueeze(1) != r.unsqueeze(0)
        longest = torch.where(differs, lcp, 0).amax(dim=1)
        masked_prefix[members] = torch.where(longest >= min_prefix_tokens, longest, 0)
    # The first L_i TRAINED tokens: rank the trained positions 1, 2, ... and drop those with rank <= L_i.
    trained_rank = mask.long().cumsum(dim=-1)
    return mask & (trained_rank > masked_prefix.unsqueeze(-1))
