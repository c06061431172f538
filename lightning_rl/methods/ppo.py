"""PPO with separate policy / frozen reference / critic roles and a first-class critic warmup.

One outer iteration (``run_iteration``) is the role sequence of the PPO guide's flow:

    prompts -> rollout.generate -> reward -> reference.score -> critic.predict
      -> policy.prepare (GAE, returns, frozen old logprobs) -> critic.install_targets
      -> epochs x minibatches: critic update; policy update (skipped during critic warmup)
      -> weight sync (skipped when the actor did not change)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch

from lightning_rl.algorithms import (
    LossType,
    clipped_policy_loss,
    clipped_value_loss,
    gae,
    k3_kl,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_stats,
    masked_mean,
    masked_whiten,
)
from lightning_rl.errors import ConfigError
from lightning_rl.methods.base import Plan
from lightning_rl.methods.onpolicy import OnPolicyMethod, describe_reward, describe_rollout
from lightning_rl.rewards import RewardConfig, process_rewards
from lightning_rl.roles import CriticModule, PolicyModule, ReferenceModule
from lightning_rl.rollout import RolloutConfig
from lightning_rl.types import Trajectory

LOSS_TYPES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-fixed")


@dataclass
class PPOConfig:
    """PPO's batch arithmetic, objective and advantage knobs."""

    batch_size: int = 32
    """Prompts per iteration, summed over all processes (PPO samples one completion per prompt)."""
    mini_batch_size: int = 0
    """Sequences per optimizer step, summed over all processes; 0 = the whole batch. Must divide batch_size."""
    micro_batch_size: int = 0
    """Sequences per forward/backward on one process; 0 = the whole per-process minibatch. Memory only: the update
    does not depend on it."""
    epochs: int = 1
    """Passes over each iteration's batch; every pass runs batch_size / mini_batch_size optimizer steps per role."""
    epsilon_low: float = 0.2
    """Lower clip of the probability ratio (1 - epsilon_low); negative disables that side."""
    epsilon_high: float = 0.2
    """Upper clip of the probability ratio (1 + epsilon_high); negative disables that side."""
    lower_bound_ratio: float = 0.0
    """Dual-clip bound for negative-advantage tokens (e.g. 3.0); 0 disables it."""
    value_clip: float = 0.2
    """Clip range of the value update around the rollout-time values; 0 disables it."""
    gamma: float = 1.0
    """Discount of GAE."""
    lam: float = 0.95
    """Lambda of GAE."""
    kl_penalty: Literal["reward", "loss", "none"] = "reward"
    """Where the KL to the reference enters: per token in the reward (k1/k2), in the loss (k3), or nowhere (none)."""
    kl_estimator: Literal["k1", "k2", "k3"] | None = None
    """KL estimator; None = k1 in the reward, k3 in the loss."""
    kl_coeff: float = 0.05
    """Coefficient of the KL term."""
    kl_coeff_clamp: float | None = None
    """Loss-KL only: bound (nats) on the k3 gradient coefficient; the value stays exact k3."""
    entropy_coeff: float = 0.0
    """Entropy bonus in the policy loss (0 = entropy is a metric only)."""
    whiten_advantages: bool = True
    """Normalise advantages to zero mean / unit variance over the batch's response tokens."""
    loss_type: LossType = "token-mean"
    """Loss reduction: token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-fixed."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"model.ppo.batch_size must be >= 1, got {self.batch_size}")
        if self.mini_batch_size < 0 or self.micro_batch_size < 0:
            raise ConfigError("model.ppo.mini_batch_size and model.ppo.micro_batch_size must be >= 0 (0 = whole batch)")
        if self.mini_batch and self.batch_size % self.mini_batch:
            raise ConfigError(
                f"model.ppo.mini_batch_size={self.mini_batch_size} does not divide model.ppo.batch_size="
                f"{self.batch_size}; choose a mini_batch_size that divides the batch (no ragged last minibatch)"
            )
        if self.epochs < 1:
            raise ConfigError(f"model.ppo.epochs must be >= 1, got {self.epochs}")
        if not (0.0 < self.gamma <= 1.0) or not (0.0 <= self.lam <= 1.0):
            raise ConfigError(
                f"model.ppo.gamma must be in (0, 1] and model.ppo.lam in [0, 1], got {self.gamma}, {self.lam}"
            )
        if self.lower_bound_ratio != 0 and self.lower_bound_ratio <= 1:
            raise ConfigError(f"model.ppo.lower_bound_ratio must be 0 (off) or > 1, got {self.lower_bound_ratio}")
        if self.kl_coeff < 0 or not math.isfinite(self.kl_coeff):
            raise ConfigError(f"model.ppo.kl_coeff must be a finite number >= 0, got {self.kl_coeff}")
        if self.kl_penalty == "reward" and self.estimator == "k3":
            raise ConfigError(
                "model.ppo.kl_estimator=k3 belongs in the loss: set model.ppo.kl_penalty=loss, or use k1/k2"
            )
        if self.kl_coeff_clamp is not None and (self.kl_penalty != "loss" or not 0 < self.kl_coeff_clamp < 20):
            raise ConfigError("model.ppo.kl_coeff_clamp needs model.ppo.kl_penalty=loss and a value in (0, 20)")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"model.ppo.loss_type must be one of {', '.join(LOSS_TYPES)}; got {self.loss_type!r}")

    @property
    def mini_batch(self) -> int:
        return self.mini_batch_size or self.batch_size

    @property
    def estimator(self) -> str:
        if self.kl_estimator is not None:
            return self.kl_estimator
        return "k3" if self.kl_penalty == "loss" else "k1"


class PPO(OnPolicyMethod):
    """PPO: policy, critic and a frozen reference; one completion per prompt; GAE advantages."""

    method_name = "ppo"

    def __init__(
        self,
        policy: PolicyModule,
        critic: CriticModule,
        reference: ReferenceModule | None = None,
        rollout: RolloutConfig | None = None,
        reward: RewardConfig | None = None,
        ppo: PPOConfig | None = None,
        max_steps: int = 100,
        critic_warmup_iterations: int = 0,
    ) -> None:
        """
        Args:
            policy: the actor.
            critic: the value function.
            reference: the frozen KL anchor; required when ppo.kl_penalty is not ``none``.
            rollout: how completions are sampled and which engine samples them.
            reward: the terminal reward (PPO's matchers or a shared rule) and the per-token process term.
            ppo: batch arithmetic, objective and advantage knobs.
            max_steps: outer iterations to run.
            critic_warmup_iterations: leading iterations that train the critic only; the actor stays byte-unchanged
                and no weight sync happens. The first actor update is iteration N+1.
        """
        super().__init__(policy=policy, rollout=rollout, reward=reward, max_steps=max_steps)
        self.critic = critic
        self.reference = reference
        self.ppo = ppo or PPOConfig()
        if critic_warmup_iterations < 0:
            raise ConfigError(f"model.critic_warmup_iterations must be >= 0, got {critic_warmup_iterations}")
        self.critic_warmup_iterations = critic_warmup_iterations
        if self.ppo.kl_penalty != "none" and reference is None:
            raise ConfigError("model.ppo.kl_penalty needs model.reference; set a reference or kl_penalty: none")
        self.rollout_config.check_for_method("ppo")

    def trainable_roles(self) -> list[Any]:
        return [self.policy, self.critic]

    def frozen_roles(self) -> list[Any]:
        return [self.reference] if self.reference is not None else []

    def prompts_per_iteration(self) -> int:
        return self.ppo.batch_size

    def optimizer_steps_per_iteration(self) -> int:
        return self.ppo.epochs * (self.ppo.batch_size // self.ppo.mini_batch)

    def plan(self, world_size: int) -> Plan:
        cfg = self.ppo
        for key, value in (("batch_size", cfg.batch_size), ("mini_batch_size", cfg.mini_batch)):
            if value % world_size:
                raise ConfigError(
                    f"model.ppo.{key}={value} is not divisible by the {world_size} processes; "
                    f"each process must get the same number of sequences"
                )
        mini_local = cfg.mini_batch // world_size
        if cfg.micro_batch_size and mini_local % cfg.micro_batch_size:
            raise ConfigError(
                f"model.ppo.micro_batch_size={cfg.micro_batch_size} does not divide the per-process minibatch "
                f"({mini_local} = model.ppo.mini_batch_size / {world_size} processes)"
            )
        steps = cfg.epochs * (cfg.batch_size // cfg.mini_batch)
        plan = Plan("ppo", world_size)
        plan.lines.update(
            {
                "prompts per iteration": cfg.batch_size,
                "completions per iteration": cfg.batch_size,
                "prompts per process": cfg.batch_size // world_size,
                "minibatches per epoch": cfg.batch_size // cfg.mini_batch,
                "sequences per minibatch": f"{cfg.mini_batch} ({mini_local} per process)",
                "micro-batch per forward": cfg.micro_batch_size or mini_local,
                "epochs": cfg.epochs,
                "optimizer steps per iteration": f"policy {steps}, critic {steps}",
                "critic warmup": f"iterations 1..{self.critic_warmup_iterations} (critic only)"
                if self.critic_warmup_iterations
                else "off",
                "iterations": self.max_steps,
                "rollout backend": describe_rollout(self.rollout_config),
                "reward": describe_reward(self.reward_config),
                "kl": "off"
                if cfg.kl_penalty == "none"
                else f"{cfg.estimator} in the {cfg.kl_penalty}, coeff {cfg.kl_coeff}",
            }
        )
        return plan

    # ----- the iteration ----------------------------------------------------------------------------------------------
    def in_warmup(self) -> bool:
        """True while the iteration being run is one of the critic-only iterations 1..N."""
        return self.iteration < self.critic_warmup_iterations

    def run_iteration(self, batch: list[dict[str, Any]]) -> dict[str, float]:
        cfg = self.ppo
        warmup = self.in_warmup()
        traj, rows = self.collect(batch, n=1)
        with self.phase("reward"):
            traj.scores = torch.tensor(self.score_rewards(traj, rows), dtype=torch.float32)
        rollout_metrics = self.rollout_metrics(traj)
        with self.phase("reference"):
            if self.reference is not None:
                traj.ref_logprobs = self.reference.score(traj, self.rollout_config.temperature, cfg.micro_batch_size)
        with self.phase("critic"):
            traj.values = self.critic.predict(traj, cfg.micro_batch_size)
        with self.phase("prepare"):
            metrics = {**rollout_metrics, **self.prepare(traj)}
        with self.phase("update"):
            metrics.update(self.update(traj, warmup))
        metrics.update(self.after_update(actor_changed=not warmup))
        metrics["train/actor_warmup"] = 1.0 if warmup else 0.0
        metrics["optim/critic_optimizer_step"] = float(self.role_steps.get("critic", 0))
        if not warmup:
            metrics["optim/policy_optimizer_step"] = float(self.role_steps.get("policy", 0))
        return metrics

    @torch.no_grad()
    def prepare(self, traj: Trajectory) -> dict[str, float]:
        """policy.prepare: frozen old logprobs, per-token rewards, GAE advantages and returns."""
        cfg = self.ppo
        mask = traj.response_mask
        traj.old_logprobs = self.policy.score(traj, self.rollout_config.temperature, cfg.micro_batch_size)
        rewards = torch.zeros_like(traj.old_logprobs)
        last = (traj.response_lengths - 1).clamp(min=0)
        rewards[torch.arange(rewards.shape[0]), last] = traj.scores
        rewards = rewards + process_rewards(self.reward_config.process, traj.scores, mask)
        metrics: dict[str, float] = {}
        if traj.ref_logprobs is not None:
            kl = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}[cfg.estimator](traj.old_logprobs, traj.ref_logprobs)
            kl_mean, kl_max = kl_stats(kl, mask)
            metrics["train/kl_mean"], metrics["train/kl_max"] = float(kl_mean), float(kl_max)
            if cfg.kl_penalty == "reward":
                rewards = rewards - cfg.kl_coeff * kl * mask
        traj.token_rewards = rewards
        advantages, returns = gae(rewards, traj.values, mask, cfg.gamma, cfg.lam)
        traj.returns = returns
        traj.advantages = masked_whiten(advantages, mask) if cfg.whiten_advantages else advantages
        gap = (traj.old_logprobs - traj.rollout_logprobs).abs()
        metrics.update(
            {
                "train/advantage_mean": float(masked_mean(advantages, mask)),
                "train/return_mean": float(masked_mean(returns, mask)),
                "train/value_mean": float(masked_mean(traj.values, mask)),
                "train/token_reward_mean": float(rewards.sum(-1).mean()),  # per-sequence sum of the shaped rewards
                "train/logprob_gap_mean": float(masked_mean(gap, mask)),
                "train/logprob_gap_max": float(gap.masked_fill(~mask, 0).max()),
            }
        )
        return metrics

    def update(self, traj: Trajectory, warmup: bool) -> dict[str, float]:
        """epochs x minibatches of critic updates, and policy updates unless in warmup."""
        cfg = self.ppo
        policy_opt, critic_opt = cast(list, self.optimizers())
        policy_sched, critic_sched = cast(list, self.lr_schedulers())
        n = traj.batch_size[0]
        mini = cfg.mini_batch // self.world_size
        sums: dict[str, list[float]] = {}
        for epoch in range(cfg.epochs):
            order = torch.randperm(n, generator=self.shuffle_generator(epoch))
            for start in range(0, n, mini):
                mb = traj[order[start : start + mini]]
                for k, v in self.critic_step(mb, critic_opt, critic_sched).items():
                    sums.setdefault(k, []).append(v)
                if not warmup:
                    for k, v in self.policy_step(mb, policy_opt, policy_sched).items():
                        sums.setdefault(k, []).append(v)
        return {k: sum(v) / len(v) for k, v in sums.items()}

    def critic_step(self, mb: Trajectory, opt, sched) -> dict[str, float]:
        cfg = self.ppo
        stats = {"loss": 0.0, "clip": 0.0}
        for chunk, weight in self.chunks(mb, cfg.micro_batch_size, cfg.loss_type):
            values = self.critic.forward_values(chunk)
            loss, clip_frac = clipped_value_loss(
                values, chunk.values, chunk.returns, chunk.response_mask, cfg.value_clip, cfg.loss_type
            )
            self.manual_backward(loss * weight)
            stats["loss"] += float(loss.detach()) * weight
            stats["clip"] += float(clip_frac) * weight
        grad_norm = self.role_optimizer_step("critic", self.critic.model, opt, sched, self.critic.optimizer_config)
        return {
            "train/value_loss": stats["loss"],
            "train/value_clip_frac": stats["clip"],
            "train/grad_norm_critic": grad_norm,
        }

    def policy_step(self, mb: Trajectory, opt, sched) -> dict[str, float]:
        cfg = self.ppo
        acc = {"loss": 0.0, "clip": 0.0, "entropy": 0.0, "kl_loss": 0.0}
        for chunk, weight in self.chunks(mb, cfg.micro_batch_size, cfg.loss_type):
            logp, entropy = self.policy.forward_logprobs(chunk, self.rollout_config.temperature, with_entropy=True)
            loss, stats = clipped_policy_loss(
                logp,
                chunk.old_logprobs,
                chunk.advantages,
                chunk.response_mask,
                epsilon_low=cfg.epsilon_low,
                epsilon_high=cfg.epsilon_high,
                lower_bound_ratio=cfg.lower_bound_ratio,
                loss_type=cfg.loss_type,
                max_tokens=self.rollout_config.max_tokens,
            )
            assert entropy is not None
            entropy_mean = masked_mean(entropy, chunk.response_mask)
            total = loss - cfg.entropy_coeff * entropy_mean if cfg.entropy_coeff else loss
            if cfg.kl_penalty == "loss" and chunk.ref_logprobs is not None:
                kl = k3_kl(logp, chunk.ref_logprobs, clamp=cfg.kl_coeff_clamp)
                kl_loss = masked_mean(kl, chunk.response_mask)
                total = total + cfg.kl_coeff * kl_loss
                acc["kl_loss"] += float(kl_loss.detach()) * weight
            self.manual_backward(total * weight)
            acc["loss"] += float(loss.detach()) * weight
            acc["clip"] += float(stats.clip_frac) * weight
            acc["entropy"] += float(entropy_mean.detach()) * weight
        grad_norm = self.role_optimizer_step("policy", self.policy.model, opt, sched, self.policy.optimizer_config)
        out = {
            "train/policy_loss": acc["loss"],
            "train/clip_frac": acc["clip"],
            "train/entropy": acc["entropy"],
            "train/grad_norm_policy": grad_norm,
        }
        if cfg.kl_penalty == "loss":
            out["train/kl_loss"] = acc["kl_loss"]
        return out
