"""process_rewards: the per-token shaping term, hand-derived values, and invariants."""

from __future__ import annotations

import pytest
import torch

from lightning_rl.errors import ConfigError
from lightning_rl.rewards import process_rewards

pytestmark = pytest.mark.unit


def test_none_is_zeros_of_the_mask_shape() -> None:
    out = process_rewards("none", torch.tensor([1.0, -2.0]), torch.ones(2, 5, dtype=torch.bool))
    assert out.shape == (2, 5) and out.dtype == torch.float32 and not out.any()


def test_linear_hand_derived() -> None:
    # Row 0: L=3, sum_{p=1..3} p = 6, weights 1/6, 2/6, 3/6 -> 2.0 * w = 1/3, 2/3, 1.
    # Row 1: L=1 -> the one token carries the whole score.
    # Row 2: no trained token -> zeros (not NaN from 0/0).
    # Row 3: a gap in the mask: positions count trained tokens only (p = 1, -, 2), weights 1/3, 0, 2/3.
    scores = torch.tensor([2.0, 3.0, 5.0, -3.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]], dtype=torch.bool)
    expected = torch.tensor(
        [[1 / 3, 2 / 3, 1.0, 0.0], [3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 0.0, -2.0, 0.0]],
        dtype=torch.float64,
    )
    out = process_rewards("linear", scores, mask)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def _loop_reference(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(mask.shape, dtype=torch.float64)
    for b in range(mask.shape[0]):
        trained = [t for t in range(mask.shape[1]) if mask[b, t]]
        total = len(trained) * (len(trained) + 1) / 2
        for p, t in enumerate(trained, start=1):
            out[b, t] = float(scores[b]) * p / total
    return out


@pytest.mark.parametrize("seed", range(5))
def test_linear_matches_a_loop_and_redistributes_the_score(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(6, generator=generator, dtype=torch.float64)
    mask = torch.rand(6, 9, generator=generator) < 0.7
    mask[0] = False
    out = process_rewards("linear", scores, mask)
    torch.testing.assert_close(out, _loop_reference(scores, mask), rtol=0, atol=1e-12)
    has_tokens = mask.any(-1)
    # sum_t r_{b,t} = s_b: the term spreads the terminal score, it does not add a second one
    torch.testing.assert_close(out.sum(-1)[has_tokens], scores[has_tokens], rtol=0, atol=1e-12)
    assert not out[~mask].any()


def test_linear_credit_grows_toward_the_end() -> None:
    out = process_rewards("linear", torch.tensor([1.0]), torch.ones(1, 7, dtype=torch.bool))[0]
    assert (out[1:] > out[:-1]).all()
    torch.testing.assert_close(out[-1], torch.tensor(2 / 8))  # last token: 2 s / (L + 1)


def test_integer_scores_give_float32() -> None:
    out = process_rewards("linear", torch.tensor([1, 0]), torch.ones(2, 2, dtype=torch.bool))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[1 / 3, 2 / 3], [0.0, 0.0]]))


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"model\.reward\.process='cubic'"):
        process_rewards("cubic", torch.zeros(1), torch.ones(1, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"expected scores \[B\] and response_mask \[B, T\]"):
        process_rewards("linear", torch.zeros(2), torch.ones(3, 4, dtype=torch.bool))
