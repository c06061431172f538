"""Overlong filtering and shared-prefix masking."""

import pytest
import torch

from lightning_rl.algorithms import common_prefix_lengths, dapo_loss_mask, shared_prefix_mask

pytestmark = pytest.mark.unit


def test_dapo_loss_mask_drops_truncated_completions() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    truncated = torch.tensor([False, True, False])
    expected = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    assert torch.equal(dapo_loss_mask(mask, truncated), expected)
    with pytest.raises(ValueError, match="truncated"):
        dapo_loss_mask(mask, torch.tensor([True]))


def _hand_group() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # Group 0 (rows 0-3) and group 1 (rows 4-5):
    #   row 0 [5 6 7 8] r=1    row 1 [5 6 9 .] r=0 (3 tokens)    row 2 [5 6 7 1] r=1    row 3 [4 6 7 8] r=0
    #   row 4 [5 6 7 8] r=1    row 5 [5 6 7 8] r=1  (tied group; identical to row 0 but another prompt)
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 0], [5, 6, 7, 1], [4, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8]])
    mask = torch.ones(6, 4, dtype=torch.bool)
    mask[1, 3] = False
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    return ids, mask, groups, rewards


def test_common_prefix_lengths() -> None:
    ids, mask, _, _ = _hand_group()
    lcp = common_prefix_lengths(ids[:4], mask[:4])
    # (0,1) share [5 6]; (0,2) share [5 6 7]; (1,2) share [5 6]; row 3 starts with 4; the diagonal is the length.
    expected = torch.tensor([[4, 2, 3, 0], [2, 3, 2, 0], [3, 2, 4, 0], [0, 0, 0, 4]])
    assert torch.equal(lcp, expected)


def test_shared_prefix_mask_by_hand() -> None:
    # L_i = longest prefix shared with a DIFFERENT-reward member of the same group:
    #   row 0: vs rows 1, 3 -> max(2, 0) = 2 (row 2 shares 3 tokens but has the same reward: ignored)
    #   row 1: vs rows 0, 2 -> 2;  row 2: vs rows 1, 3 -> 2;  row 3: 0;  rows 4, 5: tied group -> 0.
    ids, mask, groups, rewards = _hand_group()
    out = shared_prefix_mask(ids, mask, groups, rewards, min_prefix_tokens=2)
    expected = mask.clone()
    expected[:3, :2] = False
    assert torch.equal(out, expected)
    # A 3-token minimum exceeds every L_i -> nothing changes.
    assert torch.equal(shared_prefix_mask(ids, mask, groups, rewards, min_prefix_tokens=3), mask)


def _loop_shared_prefix(ids: list[list[int]], lens: list[int], groups: list[int], rewards: list[float], n: int):
    out = [[t < lens[i] for t in range(len(ids[i]))] for i in range(len(ids))]
    for i in range(len(ids)):
        longest = 0
        for j in range(len(ids)):
            if groups[j] != groups[i] or rewards[j] == rewards[i]:
                continue
            k = 0
            while k < min(lens[i], lens[j]) and ids[i][k] == ids[j][k]:
                k += 1
            longest = max(longest, k)
        if longest >= n:
            for t in range(longest):
                out[i][t] = False
    return out


@pytest.mark.parametrize("min_prefix", [1, 2, 3])
def test_shared_prefix_mask_matches_loop(min_prefix: int) -> None:
    torch.manual_seed(15)
    ids = torch.randint(0, 2, (12, 6))  # a 2-token vocabulary makes long shared prefixes common
    lens = torch.randint(0, 7, (12,))
    mask = torch.arange(6)[None, :] < lens[:, None]
    groups = torch.arange(12) % 3
    rewards = torch.randint(0, 2, (12,)).float()
    out = shared_prefix_mask(ids, mask, groups, rewards, min_prefix)
    expected = _loop_shared_prefix(ids.tolist(), lens.tolist(), groups.tolist(), rewards.tolist(), min_prefix)
    assert out.tolist() == expected


def test_shared_prefix_mask_refusals() -> None:
    ids, mask, groups, rewards = _hand_group()
    with pytest.raises(ValueError, match="min_filter_prefix_tokens"):
        shared_prefix_mask(ids, mask, groups, rewards, 0)
    with pytest.raises(ValueError, match="rewards"):
        shared_prefix_mask(ids, mask, groups, rewards[:2], 1)
