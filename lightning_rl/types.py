"""The batch containers that travel between stages, with the shape letters defined once.

Shape letters used across the project:
    B   sequences in a batch (prompts x completions per prompt)
    G   completions per prompt (group size); B = prompts * G
    P   prompt length, left-padded
    T   response length, right-padded
    V   vocabulary size

Per-token RL tensors are [B, T] and aligned with ``response_ids``: entry [b, t] belongs to the t-th generated token of
sequence b. ``response_mask`` is True on the tokens that are trained on. Values are V(s_t), the critic's estimate of the
state *before* response token t is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from tensordict import tensorclass


@dataclass
class Completion:
    """One sampled completion, as the engine returned it. Token ids are never re-tokenised."""

    prompt_index: int  # index into the prompts passed to ``generate``
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # sampled-token logprob per generated token (raw log_softmax unless processed mode)
    finish_reason: str  # "stop" (eos or a stop string) or "length" (hit max_tokens)
    text: str
    version: int  # the policy_version of the weights that produced it


@tensorclass(shadow=True)
class Trajectory:
    """A padded on-policy batch. Stages append fields; none reaches into another's internals.

    Tensors: prompt_ids / prompt_mask [B, P] (left-padded); response_ids / response_mask [B, T] (right-padded).
    The remaining tensors are [B, T] unless noted; they start as None and the stage that owns each fills it in (they are
    typed as tensors because every consumer runs after its producer).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    rollout_logprobs: torch.Tensor = None  # type: ignore[assignment]
    old_logprobs: torch.Tensor = None  # type: ignore[assignment]
    ref_logprobs: torch.Tensor = None  # type: ignore[assignment]
    values: torch.Tensor = None  # type: ignore[assignment]
    token_rewards: torch.Tensor = None  # type: ignore[assignment]
    scores: torch.Tensor = None  # type: ignore[assignment]  # [B] terminal (episode-level) reward
    advantages: torch.Tensor = None  # type: ignore[assignment]
    returns: torch.Tensor = None  # type: ignore[assignment]
    group_ids: torch.Tensor = None  # type: ignore[assignment]  # [B] int, the prompt each completion answers
    truncated: torch.Tensor = None  # type: ignore[assignment]  # [B] bool, finish_reason == "length"
    texts: list[str] | None = None

    if TYPE_CHECKING:  # what @tensorclass adds, spelled out for the type checker

        @property
        def batch_size(self) -> torch.Size: ...

        def __getitem__(self, index: Any) -> Trajectory: ...

        def __init__(self, *args: Any, batch_size: Any = None, **kwargs: Any) -> None: ...

    @property
    def input_ids(self) -> torch.Tensor:
        """[B, P+T] prompt then response tokens."""
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """[B, P+T] True on real (non-pad) tokens."""
        return torch.cat([self.prompt_mask.bool(), self.response_mask.bool()], dim=1)

    @property
    def response_lengths(self) -> torch.Tensor:
        """[B] number of response tokens."""
        return self.response_mask.sum(-1)


@dataclass
class PreferenceBatch:
    """A DPO batch: the chosen and rejected completions of the same prompts, each [B, P+T] with [B, T] masks."""

    chosen_ids: torch.Tensor
    chosen_attention_mask: torch.Tensor
    chosen_response_mask: torch.Tensor
    rejected_ids: torch.Tensor
    rejected_attention_mask: torch.Tensor
    rejected_response_mask: torch.Tensor
    rows: list[dict[str, Any]] = field(default_factory=list)
