"""render_prompts and build_trajectory: chat rendering to ids, and engine completions to a padded Trajectory."""

from __future__ import annotations

import pytest
import torch

from lightning_rl.methods.trajectory import build_trajectory, render_prompts
from lightning_rl.models.tiny import build_char_tokenizer
from lightning_rl.types import Completion

pytestmark = pytest.mark.unit

PAD = 99  # not 0, so a zero-initialised buffer cannot pass for padding


def completion(prompt_index: int, prompt: list[int], tokens: list[int], finish: str, base: float = 0.5) -> Completion:
    # Logprob of token t is -(base + t): distinct per row (base) and per position, so any misplacement shows.
    logprobs = [-(base + t) for t in range(len(tokens))]
    return Completion(prompt_index, prompt, tokens, logprobs, finish, f"c{prompt_index}:{base}", version=0)


@pytest.fixture
def completions() -> list[Completion]:
    # Two prompts x two completions, prompt-major; prompt 0 is 3 tokens, prompt 1 is 1 token. Responses of 2, 4, 0, 1
    # tokens: one hit max_tokens (length), one is empty (e.g. an immediate stop string).
    return [
        completion(0, [10, 11, 12], [20, 2], "stop", base=0.1),
        completion(0, [10, 11, 12], [21, 22, 23, 24], "length", base=0.2),
        completion(1, [13], [], "stop", base=0.3),
        completion(1, [13], [25], "stop", base=0.4),
    ]


def test_build_trajectory_pads_and_masks(completions) -> None:
    traj = build_trajectory(completions, PAD)
    assert traj.batch_size == torch.Size([4])
    # Prompts left-padded to the longest (3), responses right-padded to the longest (4).
    assert torch.equal(traj.prompt_ids, torch.tensor([[10, 11, 12], [10, 11, 12], [PAD, PAD, 13], [PAD, PAD, 13]]))
    assert torch.equal(traj.prompt_mask, torch.tensor([[1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 0, 1]]).bool())
    assert torch.equal(
        traj.response_ids,
        torch.tensor([[20, 2, PAD, PAD], [21, 22, 23, 24], [PAD, PAD, PAD, PAD], [25, PAD, PAD, PAD]]),
    )
    # Every generated token is trained on, the eos included; padding never is.
    expected_mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]]).bool()
    assert torch.equal(traj.response_mask, expected_mask)
    assert traj.prompt_mask.dtype == traj.response_mask.dtype == torch.bool
    assert traj.prompt_ids.dtype == traj.response_ids.dtype == torch.long
    assert torch.equal(traj.response_lengths, torch.tensor([2, 4, 0, 1]))
    assert torch.equal(traj.input_ids, torch.cat([traj.prompt_ids, traj.response_ids], dim=1))
    assert torch.equal(traj.attention_mask, torch.cat([traj.prompt_mask, expected_mask], dim=1))


def test_build_trajectory_places_rollout_logprobs_on_their_tokens(completions) -> None:
    traj = build_trajectory(completions, PAD)
    expected = torch.tensor(
        [[-0.1, -1.1, 0.0, 0.0], [-0.2, -1.2, -2.2, -3.2], [0.0, 0.0, 0.0, 0.0], [-0.4, 0.0, 0.0, 0.0]]
    )
    assert traj.rollout_logprobs.dtype == torch.float32
    torch.testing.assert_close(traj.rollout_logprobs, expected, atol=0, rtol=0)


def test_build_trajectory_carries_groups_truncation_and_texts(completions) -> None:
    traj = build_trajectory(completions, PAD)
    assert torch.equal(traj.group_ids, torch.tensor([0, 0, 1, 1]))
    assert traj.group_ids.dtype == torch.long
    assert torch.equal(traj.truncated, torch.tensor([False, True, False, False]))
    assert list(traj.texts) == ["c0:0.1", "c0:0.2", "c1:0.3", "c1:0.4"]
    # Slicing (micro-batches, minibatch shuffles) keeps every field aligned, the texts included.
    part = traj[torch.tensor([3, 1])]
    assert list(part.texts) == ["c1:0.4", "c0:0.2"]
    assert torch.equal(part.group_ids, torch.tensor([1, 0]))
    assert torch.equal(part.response_ids[0], traj.response_ids[3])


def test_build_trajectory_all_empty_responses_keep_one_column() -> None:
    traj = build_trajectory([completion(0, [1, 2], [], "stop"), completion(1, [3], [], "stop")], PAD)
    assert traj.response_ids.shape == traj.response_mask.shape == traj.rollout_logprobs.shape == (2, 1)
    assert not traj.response_mask.any()
    assert torch.equal(traj.response_ids, torch.full((2, 1), PAD))


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def ids_of(tokenizer, tokens: list[str]) -> list[int]:
    return tokenizer.convert_tokens_to_ids(tokens)


def test_render_prompts_string_is_one_user_turn(tokenizer) -> None:
    ids = render_prompts(tokenizer, [{"prompt": "12+7=", "answer": "19"}, {"prompt": "3"}])
    assert ids == [
        ids_of(tokenizer, ["<|user|>", "1", "2", "+", "7", "=", "<|end|>", "<|assistant|>"]),
        ids_of(tokenizer, ["<|user|>", "3", "<|end|>", "<|assistant|>"]),
    ]
    assert tokenizer.unk_token_id not in ids[0]


def test_render_prompts_conversation(tokenizer) -> None:
    messages = [
        {"role": "system", "content": "hi"},
        {"role": "user", "content": "1+1="},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2+2="},
    ]
    (ids,) = render_prompts(tokenizer, [{"prompt": messages}])
    system = ["<|system|>", "h", "i", "<|end|>"]
    first = ["<|user|>", "1", "+", "1", "=", "<|end|>", "<|assistant|>", "2", "<|end|>"]
    second = ["<|user|>", "2", "+", "2", "=", "<|end|>", "<|assistant|>"]
    expected = system + first + second
    assert ids == ids_of(tokenizer, expected)
