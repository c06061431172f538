"""Supervised fine-tuning of the policy role on (prompt, reference) rows: the warm start for RL.

The completion trained on is the row's ``completion`` (else ``reference``) followed by the eos token, under the
tokenizer's chat template. Every ``eval_every`` iterations (and at the end) the policy greedily answers a fixed held-out
prompt set: ``eval/exact_match`` is the share answered with nothing but the right integer (PPO's default reward),
``eval/answer_correct`` the share whose first integer is right whatever the wording. At the end of fit the weights
and tokenizer are exported in HF format to ``export_dir``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lightning_rl.algorithms import masked_mean
from lightning_rl.errors import ConfigError
from lightning_rl.methods.base import Plan, RLMethod
from lightning_rl.methods.trajectory import build_trajectory, render_prompts
from lightning_rl.roles import PolicyModule
from lightning_rl.rollout.base import Sampling
from lightning_rl.rollout.hf import HFRolloutEngine
from lightning_rl.types import Completion


class SFT(RLMethod):
    """Next-token cross-entropy on reference completions; one iteration = one optimizer step."""

    method_name = "sft"

    def __init__(
        self,
        policy: PolicyModule,
        batch_size: int = 64,
        max_steps: int = 1000,
        eval_every: int = 100,
        eval_size: int = 200,
        eval_seed: int = 12345,
        export_dir: str | None = None,
    ) -> None:
        """
        Args:
            policy: the model being fine-tuned.
            batch_size: rows per iteration, summed over all processes.
            max_steps: iterations (= optimizer steps) to run.
            eval_every: iterations between greedy exact-match evaluations; 0 evaluates only at the end.
            eval_size: held-out arithmetic prompts in each evaluation.
            eval_seed: seed of the held-out prompts (distinct from the training data seed).
            export_dir: where the final HF-format model and tokenizer are written; None skips the export.
        """
        super().__init__(max_steps=max_steps)
        if batch_size < 1 or eval_every < 0 or eval_size < 0:
            raise ConfigError("model.batch_size must be >= 1, model.eval_every and model.eval_size >= 0")
        self.policy = policy
        self.batch_size = batch_size
        self.eval_every = eval_every
        self.eval_size = eval_size
        self.eval_seed = eval_seed
        self.export_dir = export_dir

    def trainable_roles(self) -> list[Any]:
        return [self.policy]

    def plan(self, world_size: int) -> Plan:
        if self.batch_size % world_size:
            raise ConfigError(f"model.batch_size={self.batch_size} is not divisible by the {world_size} processes")
        plan = Plan("sft", world_size)
        plan.lines.update(
            {
                "rows per iteration": self.batch_size,
                "rows per process": self.batch_size // world_size,
                "optimizer steps per iteration": "policy 1",
                "iterations": self.max_steps,
                "evaluation": f"every {self.eval_every} iterations, {self.eval_size} held-out prompts"
                if self.eval_every
                else "at the end",
                "export": self.export_dir or "none",
            }
        )
        return plan

    def rows_per_iteration(self) -> int:
        return self.batch_size

    def run_iteration(self, batch: list[dict[str, Any]]) -> dict[str, float]:
        with self.phase("update"):
            traj = self.teacher_forced(batch)
            logp, _ = self.policy.forward_logprobs(traj)
            loss = -masked_mean(logp, traj.response_mask)
            self.manual_backward(loss)
            grad_norm = self.role_optimizer_step(
                "policy", self.policy.model, self.optimizers(), self.lr_schedulers(), self.policy.optimizer_config
            )
        metrics = {"train/sft_loss": float(loss.detach()), "train/grad_norm_policy": grad_norm}
        step = self.iteration + 1
        if self.eval_size and ((self.eval_every and step % self.eval_every == 0) or step == self.max_steps):
            with self.phase("eval"):
                metrics.update(self.evaluate())
        return metrics

    def teacher_forced(self, batch: list[dict[str, Any]]):
        prompt_ids = render_prompts(self.tokenizer, batch)
        eos = self.tokenizer.eos_token_id
        completions = []
        for i, (row, ids) in enumerate(zip(batch, prompt_ids, strict=True)):
            target = str(row.get("completion", row["reference"]))
            answer = self.tokenizer(target, add_special_tokens=False)["input_ids"] + [eos]
            completions.append(Completion(i, ids, answer, [0.0] * len(answer), "stop", target, 0))
        return build_trajectory(completions, self.tokenizer.pad_token_id)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Greedy accuracy on the held-out arithmetic prompts, by PPO's exact matcher and by the first integer."""
        from lightning_rl.data.arithmetic import ArithmeticTask
        from lightning_rl.rewards import score

        rows = ArithmeticTask().rows(self.eval_seed, self.eval_size)
        model = self.policy.model
        assert model is not None
        engine = HFRolloutEngine(lambda: model, self.tokenizer)
        completions = engine.generate(render_prompts(self.tokenizer, rows), Sampling(temperature=0.0, max_tokens=24))
        texts, references = [c.text for c in completions], [r["reference"] for r in rows]
        return {
            "eval/exact_match": sum(score("arithmetic_exact_match", texts, references)) / len(rows),
            "eval/answer_correct": sum(score("arithmetic", texts, references)) / len(rows),
        }

    def on_fit_end(self) -> None:
        if self.export_dir is None:
            return
        state = self.policy.hf_state_dict()  # collective
        if self.trainer.is_global_zero:
            from lightning_rl.checkpoint.hf_export import export_hf

            export_hf(self.policy, state, self.tokenizer, Path(self.export_dir))
