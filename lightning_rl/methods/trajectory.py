"""From rows to token ids, and from engine completions to a padded Trajectory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lightning_rl.types import Completion, Trajectory


def render_prompts(tokenizer, rows: Sequence[dict[str, Any]]) -> list[list[int]]:
    """Chat-template each row's ``prompt`` (a string is one user turn; a list is a conversation) into token ids."""
    out = []
    for row in rows:
        prompt = row["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out


def build_trajectory(completions: Sequence[Completion], pad_id: int) -> Trajectory:
    """Left-pad prompts, right-pad responses; ``response_mask`` marks every generated token (eos included)."""
    b = len(completions)
    p = max(len(c.prompt_token_ids) for c in completions)
    t = max(1, max(len(c.token_ids) for c in completions))
    prompt_ids = torch.full((b, p), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((b, p), dtype=torch.bool)
    response_ids = torch.full((b, t), pad_id, dtype=torch.long)
    response_mask = torch.zeros((b, t), dtype=torch.bool)
    rollout_logprobs = torch.zeros((b, t), dtype=torch.float32)
    for i, c in enumerate(completions):
        n_p, n_t = len(c.prompt_token_ids), len(c.token_ids)
        prompt_ids[i, p - n_p :] = torch.tensor(c.prompt_token_ids, dtype=torch.long)
        prompt_mask[i, p - n_p :] = True
        if n_t:
            response_ids[i, :n_t] = torch.tensor(c.token_ids, dtype=torch.long)
            response_mask[i, :n_t] = True
            rollout_logprobs[i, :n_t] = torch.tensor(c.logprobs[:n_t], dtype=torch.float32)
    return Trajectory(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        rollout_logprobs=rollout_logprobs,
        group_ids=torch.tensor([c.prompt_index for c in completions], dtype=torch.long),
        truncated=torch.tensor([c.finish_reason == "length" for c in completions], dtype=torch.bool),
        texts=[c.text for c in completions],
        batch_size=[b],
    )
