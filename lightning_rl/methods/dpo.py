"""Direct Preference Optimization of the policy role against a frozen reference, on ``{prompt, chosen, rejected}`` rows.

Both completions of a pair are teacher-forced after the chat-templated prompt (completion text + eos), summed into
sequence log-probabilities under the policy and, without gradient, under the reference, and fed to ``dpo_loss``
(Rafailov et al. 2023). One iteration = one batch of pairs = one optimizer step; ``grad_accum`` splits the batch into
equal micro-batches whose gradients add up to exactly the whole batch's.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from lightning_rl.algorithms.dpo import dpo_loss, sequence_logprobs
from lightning_rl.errors import ConfigError
from lightning_rl.methods.base import Plan, RLMethod
from lightning_rl.methods.trajectory import build_trajectory, render_prompts
from lightning_rl.roles import PolicyModule, ReferenceModule
from lightning_rl.types import Completion, Trajectory


class DPO(RLMethod):
    """Sigmoid DPO loss on preference pairs; the reference is the frozen anchor of the implicit reward."""

    method_name = "dpo"

    def __init__(
        self,
        policy: PolicyModule,
        reference: ReferenceModule,
        beta: float = 0.1,
        label_smoothing: float = 0.0,
        batch_size: int = 16,
        grad_accum: int = 1,
        max_steps: int = 100,
    ) -> None:
        """
        Args:
            policy: the model being trained.
            reference: the frozen anchor, normally built from the policy's starting weights.
            beta: DPO temperature: the implicit reward is beta * log(pi / pi_ref); larger keeps the policy closer to
                the reference. 0.1 is usual for HF LMs.
            label_smoothing: conservative DPO's assumed label-flip probability, in [0, 0.5); 0 is plain DPO.
            batch_size: preference pairs per iteration, summed over all processes.
            grad_accum: micro-batches per optimizer step; the pairs per process must divide evenly into them.
            max_steps: iterations (= optimizer steps) to run.
        """
        super().__init__(max_steps=max_steps)
        if not (math.isfinite(beta) and beta > 0):
            raise ConfigError(f"model.beta must be a positive finite number (usual for HF LMs: 0.1), got {beta}")
        if not 0 <= label_smoothing < 0.5:
            raise ConfigError(f"model.label_smoothing must be in [0, 0.5) (0 = plain DPO), got {label_smoothing}")
        if batch_size < 1 or grad_accum < 1:
            raise ConfigError(
                "model.batch_size and model.grad_accum must be >= 1, "
                f"got batch_size={batch_size}, grad_accum={grad_accum}"
            )
        if batch_size % grad_accum:
            raise ConfigError(
                f"model.batch_size={batch_size} is not divisible by model.grad_accum={grad_accum}: micro-batches "
                "must be equal for the accumulated gradient to be the whole batch's"
            )
        self.policy = policy
        self.reference = reference
        self.beta = beta
        self.label_smoothing = label_smoothing
        self.batch_size = batch_size
        self.grad_accum = grad_accum

    def trainable_roles(self) -> list[Any]:
        return [self.policy]

    def frozen_roles(self) -> list[Any]:
        return [self.reference]

    def plan(self, world_size: int) -> Plan:
        if self.batch_size % world_size:
            raise ConfigError(f"model.batch_size={self.batch_size} is not divisible by the {world_size} processes")
        per_process = self.batch_size // world_size
        if per_process % self.grad_accum:
            raise ConfigError(
                f"model.batch_size={self.batch_size} gives {per_process} pairs per process, not divisible by "
                f"model.grad_accum={self.grad_accum}"
            )
        micro = per_process // self.grad_accum
        plan = Plan("dpo", world_size)
        plan.lines.update(
            {
                "pairs per iteration": self.batch_size,
                "pairs per process": per_process,
                "micro-batches per step": f"{self.grad_accum} x {micro} pairs ({2 * micro} sequences per forward)",
                "optimizer steps per iteration": "policy 1",
                "iterations": self.max_steps,
                "objective": f"sigmoid DPO, beta={self.beta}, label_smoothing={self.label_smoothing}",
                "reference": f"frozen ({self.reference.model_path})",
            }
        )
        return plan

    def rows_per_iteration(self) -> int:
        return self.batch_size

    # ----- the iteration ----------------------------------------------------------------------------------------------
    def run_iteration(self, batch: list[dict[str, Any]]) -> dict[str, float]:
        with self.phase("update"):
            metrics = self.accumulate_gradients(batch)
            grad_norm = self.role_optimizer_step(
                "policy", self.policy.model, self.optimizers(), self.lr_schedulers(), self.policy.optimizer_config
            )
        metrics["train/grad_norm_policy"] = grad_norm
        metrics["optim/policy_optimizer_step"] = float(self.role_steps["policy"])
        return metrics

    def accumulate_gradients(self, batch: list[dict[str, Any]]) -> dict[str, float]:
        """Backward the batch's mean DPO loss into the policy's ``.grad`` in ``grad_accum`` equal micro-batches.

        The batch loss is a mean over pairs, so with k equal micro-batches it is the sum of each micro-batch's mean
        divided by k: the accumulated gradient is the whole batch's, exactly. The statistics average the same way.
        """
        n = len(batch)
        if n % self.grad_accum:
            raise ConfigError(
                f"a batch of {n} pairs does not split into model.grad_accum={self.grad_accum} micro-batches"
            )
        size = n // self.grad_accum
        totals = {"loss": 0.0, "chosen": 0.0, "rejected": 0.0, "margin": 0.0, "accuracy": 0.0}
        for start in range(0, n, size):
            traj = self.teacher_forced(batch[start : start + size])
            ref_logps = sequence_logprobs(self.reference.score(traj), traj.response_mask)
            token_logps, _ = self.policy.forward_logprobs(traj)
            policy_logps = sequence_logprobs(token_logps, traj.response_mask)
            # Rows [0, size) are the chosen completions, rows [size, 2 * size) the rejected ones of the same pairs.
            loss, stats = dpo_loss(
                policy_logps[:size],
                policy_logps[size:],
                ref_logps[:size],
                ref_logps[size:],
                beta=self.beta,
                label_smoothing=self.label_smoothing,
            )
            self._backward(loss / self.grad_accum)
            for key, value in zip(
                totals,
                (loss.detach(), stats.chosen_rewards, stats.rejected_rewards, stats.margin, stats.accuracy),
                strict=True,
            ):
                totals[key] += float(value) / self.grad_accum
        return {
            "train/dpo_loss": totals["loss"],
            "train/chosen_reward": totals["chosen"],
            "train/rejected_reward": totals["rejected"],
            "train/reward_margin": totals["margin"],
            "train/reward_accuracy": totals["accuracy"],
        }

    def _backward(self, loss: torch.Tensor) -> None:
        # Through the strategy under a Trainer (precision, FSDP hooks); plain autograd when driven directly.
        if self._trainer is not None:
            self.manual_backward(loss)
        else:
            loss.backward()

    def teacher_forced(self, pairs: list[dict[str, Any]]) -> Trajectory:
        """One trajectory of 2P rows: the P chosen completions, then the P rejected ones, each text + eos."""
        prompt_ids = render_prompts(self.tokenizer, pairs)
        eos = self.tokenizer.eos_token_id
        completions: list[Completion] = []
        for column in ("chosen", "rejected"):
            for ids, row in zip(prompt_ids, pairs, strict=True):
                text = str(row[column])
                answer = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
                completions.append(Completion(len(completions), ids, answer, [0.0] * len(answer), "stop", text, 0))
        return build_trajectory(completions, self.tokenizer.pad_token_id)
