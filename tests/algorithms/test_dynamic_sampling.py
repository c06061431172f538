"""Informative-group gate, quota arithmetic, informative-first assembly and the exact quota split."""

import random

import pytest
import torch

from lightning_rl.algorithms import assemble_groups, informative_groups, informative_quota, split_quota

pytestmark = pytest.mark.unit


def test_informative_groups_by_hand() -> None:
    # Group ids ascending: 2 -> {1, 1} tied; 5 -> {0, 1} spread; 9 -> {3} singleton (never informative).
    rewards = torch.tensor([1.0, 0.0, 1.0, 3.0, 1.0])
    group_ids = torch.tensor([2, 5, 2, 9, 5])
    assert informative_groups(rewards, group_ids).tolist() == [False, True, False]


def test_informative_quota() -> None:
    assert 0.14 * 50 == 7.000000000000001  # why the fraction is read as a rational first
    assert informative_quota(50, min_informative_groups_frac=0.14) == 7
    assert informative_quota(8, min_informative_groups_frac=1.0) == 8
    assert informative_quota(8, min_informative_groups_frac=0.01) == 1  # never 0 once set
    assert informative_quota(64, min_informative_groups_frac=0.3) == 20  # ceil(19.2)
    assert informative_quota(8, min_informative_groups=3) == 3
    assert informative_quota(8) == 0  # dynamic sampling off
    with pytest.raises(ValueError, match="not both"):
        informative_quota(8, min_informative_groups=2, min_informative_groups_frac=0.5)
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"\(0, 1\]"):
            informative_quota(8, min_informative_groups_frac=bad)
    with pytest.raises(ValueError, match="exceeds groups_per_step"):
        informative_quota(8, min_informative_groups=9)


def test_assemble_groups_informative_first() -> None:
    flags = [False, True, False, True, True]
    assert assemble_groups(flags, 4) == [1, 3, 4, 0]
    assert assemble_groups(torch.tensor(flags), 2) == [1, 3]
    assert assemble_groups(flags, 10) == [1, 3, 4, 0, 2]


def test_split_quota_by_hand() -> None:
    assert split_quota(7, [4, 4, 4]) == [3, 2, 2]  # 7 // 3 = 2 each, the first cell takes the remainder
    assert split_quota(10, [1, 2, 3, 4]) == [1, 2, 3, 4]
    # exact shares 0.5, 1, 1.5, 2 -> floors 0, 1, 1, 2; the one leftover unit goes to the first 0.5 remainder.
    assert split_quota(5, [1, 2, 3, 4]) == [1, 1, 1, 2]
    assert split_quota(0, [3, 3]) == [0, 0]
    with pytest.raises(ValueError, match="exceeds"):
        split_quota(7, [3, 3])


def test_split_quota_invariants() -> None:
    rng = random.Random(16)
    for _ in range(200):
        caps = [rng.randint(0, 9) for _ in range(rng.randint(1, 6))]
        if sum(caps) == 0:
            continue
        quota = rng.randint(0, sum(caps))
        shares = split_quota(quota, caps)
        assert sum(shares) == quota
        assert all(0 <= s <= c for s, c in zip(shares, caps, strict=True))
        assert shares == split_quota(quota, caps)  # deterministic
