"""logprob_gap_stats against hand values."""

import pytest
import torch

from lightning_rl.algorithms import logprob_gap_stats

pytestmark = pytest.mark.unit
F64 = torch.float64


def test_logprob_gap_by_hand() -> None:
    # Gaps on the trained tokens: 0.1, -0.3, 0.2 (the padding's 50 is ignored): mean 0, |.| mean 0.2, max |.| 0.3.
    trainer = torch.tensor([[-1.0, -2.3, 0.0], [-0.8, 0.0, 50.0]], dtype=F64)
    rollout = torch.tensor([[-1.1, -2.0, 0.0], [-1.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    stats = logprob_gap_stats(trainer, rollout, mask)
    assert float(stats.mean) == pytest.approx(0.0, abs=1e-12)
    assert float(stats.abs_mean) == pytest.approx(0.2, abs=1e-12)
    assert float(stats.max_abs) == pytest.approx(0.3, abs=1e-12)
    empty = logprob_gap_stats(trainer, rollout, torch.zeros_like(mask))
    assert float(empty.mean) == float(empty.abs_mean) == float(empty.max_abs) == 0.0
    with pytest.raises(ValueError, match="must all be"):
        logprob_gap_stats(trainer, rollout[:1], mask)
