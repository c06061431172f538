"""The ``hf`` backend: transformers ``generate`` on the policy module itself.

No weight sync is needed (the engine IS the policy), so ``update_weights`` only publishes the version. Under FSDP2 every
rank must run the same number of forwards, so generation runs with ``synced_gpus`` whenever a process group has more
than
one rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from lightning_rl.rollout.base import Sampling
from lightning_rl.types import Completion


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if len(p):
            ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p) :] = 1
    return ids, mask


class HFRolloutEngine:
    """Samples with ``model.generate``; ``model_fn`` returns the live policy model (it may be rebuilt or sharded)."""

    def __init__(self, model_fn: Callable[[], nn.Module], tokenizer, micro_batch_size: int = 0) -> None:
        self._model_fn = model_fn
        self.tokenizer = tokenizer
        self.micro_batch_size = micro_batch_size
        self.version = 0
        self._calls = 0

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: Sampling) -> list[Completion]:
        import torch.distributed as dist

        model = self._model_fn()
        synced = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        was_training = model.training
        model.eval()
        self._calls += 1
        try:
            with torch.random.fork_rng(enabled=sampling.seed is not None):
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed + self._calls)
                out: list[Completion] = []
                step = self.micro_batch_size if self.micro_batch_size > 0 else max(1, len(prompt_token_ids))
                for start in range(0, len(prompt_token_ids), step):
                    chunk = prompt_token_ids[start : start + step]
                    out.extend(self._generate_chunk(model, chunk, sampling, start, synced))
                return out
        finally:
            model.train(was_training)

    @torch.no_grad()
    def _generate_chunk(self, model, prompts, sampling: Sampling, offset: int, synced: bool) -> list[Completion]:
        tok = self.tokenizer
        ids, mask = _left_pad(prompts, tok.pad_token_id)
        do_sample = sampling.temperature > 0
        eos = None if sampling.ignore_eos else tok.eos_token_id
        kwargs = dict(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=sampling.max_tokens,
            num_return_sequences=sampling.n,
            do_sample=do_sample,
            pad_token_id=tok.pad_token_id,
            eos_token_id=eos,
            return_dict_in_generate=True,
            output_logits=sampling.logprobs_mode == "raw",
            output_scores=sampling.logprobs_mode == "processed",
            synced_gpus=synced,
        )
        if do_sample:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=max(sampling.top_k, 0) or None)
        if sampling.stop:
            kwargs.update(stop_strings=list(sampling.stop), tokenizer=tok)
        result = model.generate(**kwargs)
        width = ids.shape[1]
        gen = result.sequences[:, width:]
        steps = result.logits if sampling.logprobs_mode == "raw" else result.scores
        # [B*n, L] log-probability of the chosen token at each step.
        logp_all = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in steps], dim=1)
        chosen = logp_all.gather(-1, gen[:, : logp_all.shape[1]].unsqueeze(-1)).squeeze(-1)
        completions = []
        for row in range(gen.shape[0]):
            tokens = gen[row].tolist()
            finish = "length"
            for j, t in enumerate(tokens):
                if t == eos:
                    tokens, finish = tokens[: j + 1], "stop"
                    break
            if finish == "length" and sampling.stop:
                # generate() stops a row on a stop string but pads it while other rows continue: cut after the token
                # that completes the stop string.
                for j in range(1, len(tokens) + 1):
                    if any(s in tok.decode(tokens[:j], skip_special_tokens=True) for s in sampling.stop):
                        tokens, finish = tokens[:j], "stop"
                        break
            text = tok.decode(tokens, skip_special_tokens=True)
            if finish == "stop" and sampling.stop:
                for s in sampling.stop:
                    if s in text:
                        text = text[: text.index(s)]
                        break
            prompt_index = offset + row // sampling.n
            completions.append(
                Completion(
                    prompt_index=prompt_index,
                    prompt_token_ids=list(prompts[row // sampling.n]),
                    token_ids=tokens,
                    logprobs=chosen[row, : len(tokens)].tolist(),
                    finish_reason=finish,
                    text=text,
                    version=self.version,
                )
            )
        return completions

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """The engine samples from the live policy: publishing a version is all there is to do."""
        self.version = version

    def sleep(self) -> None:
        return None

    def wake_up(self) -> None:
        return None

    def close(self) -> None:
        return None
