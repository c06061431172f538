"""token_logprobs / entropy_from_logits against closed forms."""

import math

import pytest
import torch

from lightning_rl.algorithms import entropy_from_logits, token_logprobs

pytestmark = pytest.mark.unit
F64 = torch.float64


def test_token_logprobs_by_hand() -> None:
    # logits = log([1, 2, 3, 4]) -> softmax = [0.1, 0.2, 0.3, 0.4].
    # Temperature 2 halves the logits -> p_v proportional to sqrt(v): p_4 = 2 / (1 + sqrt2 + sqrt3 + 2).
    logits = torch.log(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)).expand(1, 2, 4)
    ids = torch.tensor([[3, 0]])
    torch.testing.assert_close(
        token_logprobs(logits, ids, dtype=F64), torch.tensor([[math.log(0.4), math.log(0.1)]], dtype=F64)
    )
    z = 1 + math.sqrt(2) + math.sqrt(3) + 2
    torch.testing.assert_close(
        token_logprobs(logits, ids, temperature=2.0, dtype=F64),
        torch.tensor([[math.log(2 / z), math.log(1 / z)]], dtype=F64),
    )


def test_token_logprobs_topk_ids_and_dtype() -> None:
    logits = torch.log(torch.tensor([1.0, 2.0, 3.0, 4.0])).expand(1, 1, 4).to(torch.bfloat16)
    topk = torch.tensor([[[3, 2]]])
    out = token_logprobs(logits, topk)
    assert out.dtype == torch.float32 and out.shape == (1, 1, 2)
    # bf16 rounds log(3) etc., so compare loosely here; the float64 path is pinned above.
    torch.testing.assert_close(out, torch.tensor([[[math.log(0.4), math.log(0.3)]]]), atol=2e-2, rtol=0)


def test_token_logprobs_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(torch.zeros(1, 1, 3), torch.zeros(1, 1, dtype=torch.long), temperature=0.0)
    with pytest.raises(ValueError, match="token_ids"):
        token_logprobs(torch.zeros(1, 1, 3), torch.zeros(1, dtype=torch.long))


def test_entropy_by_hand() -> None:
    # p = [0.1, 0.2, 0.3, 0.4] -> H = -sum p ln p; uniform over 5 -> ln 5; a -inf logit contributes 0 (not NaN).
    logits = torch.log(torch.tensor([[[1.0, 2.0, 3.0, 4.0, 0.0]]], dtype=F64))  # last logit is -inf
    expected = -sum(p * math.log(p) for p in (0.1, 0.2, 0.3, 0.4))
    torch.testing.assert_close(entropy_from_logits(logits, dtype=F64), torch.tensor([[expected]], dtype=F64))
    uniform = torch.zeros(2, 3, 5, dtype=F64)
    torch.testing.assert_close(entropy_from_logits(uniform, dtype=F64), torch.full((2, 3), math.log(5), dtype=F64))


def test_entropy_gradient_is_finite_with_masked_vocabulary() -> None:
    # p log p with p = 0 must not produce 0 * -inf = NaN in the backward; dH/dlogit_v = -p_v (log p_v + H) elsewhere.
    logits = torch.tensor([[[0.0, 1.0, float("-inf")]]], dtype=F64, requires_grad=True)
    entropy = entropy_from_logits(logits, dtype=F64)
    (grad,) = torch.autograd.grad(entropy.sum(), logits)
    p = torch.softmax(logits.detach(), -1)
    logp = torch.log(p[..., :2])
    expected = torch.cat([-p[..., :2] * (logp + entropy.detach()[..., None]), torch.zeros(1, 1, 1, dtype=F64)], -1)
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


def test_entropy_matches_temperature_scaled_distribution() -> None:
    torch.manual_seed(6)
    logits = torch.randn(3, 4, 7, dtype=F64)
    p = torch.softmax(logits / 0.7, -1)
    torch.testing.assert_close(
        entropy_from_logits(logits, temperature=0.7, dtype=F64), -(p * p.log()).sum(-1), atol=1e-12, rtol=0
    )
