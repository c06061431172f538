"""Helpers shared by the rollout tests (engine-free)."""

from __future__ import annotations

import time

import psutil
import torch


def hf_completion_logprobs(model, prompt: list[int], tokens: list[int]) -> list[float]:
    """The HF model's log p(token_t | prompt, tokens_<t) for each generated token (raw log_softmax, float32)."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    lp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return lp.gather(-1, torch.tensor(tokens)[:, None])[:, 0].tolist()


def one_training_step(model, *, lr: float = 1e-2, seed: int = 0) -> None:
    """One AdamW step on a next-token loss over random sequences: enough to move every weight."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, int(model.config.vocab_size), (4, 24), generator=gen)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.eval()


def live_children(exclude: frozenset[int] | set[int] = frozenset()) -> list[psutil.Process]:
    """Running descendants of this process (zombies and multiprocessing's resource tracker aside)."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid in exclude or child.status() == psutil.STATUS_ZOMBIE:
                continue
            if "multiprocessing.resource_tracker" in " ".join(child.cmdline()):
                continue
            alive.append(child)
        except psutil.NoSuchProcess:
            continue
    return alive


def wait_for_no_children(exclude: frozenset[int] | set[int], timeout: float = 30.0) -> list[str]:
    """Poll until no new descendant runs; returns a description of the survivors (empty when none)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = live_children(exclude)
        if not alive or time.monotonic() > deadline:
            out = []
            for p in alive:
                try:
                    out.append(f"{p.pid} {p.name()} {' '.join(p.cmdline())[:120]}")
                except psutil.NoSuchProcess:
                    continue
            return out
        time.sleep(0.5)
