"""The GRPO family (GRPO, Dr-GRPO, GSPO, DAPO) as one method: a policy, an optional frozen reference, no critic.

One outer iteration (``run_iteration``):

    prompts -> rollout (group_size completions each) -> reward
      -> [dynamic sampling: top-up rounds until the batch holds the informative-group quota]
      -> group advantages -> [reference.score] -> pi_old (policy.score, or the rollout's logprobs)
      -> DAPO loss masks -> n_mini optimizer steps over the shuffled batch -> weight sync

The variants are settings of ``GRPOConfig`` (see ``recipes/``); all the math is in ``lightning_rl.algorithms``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from lightning_rl.algorithms import (
    LossAccumulator,
    aggregate_loss,
    assemble_groups,
    clipped_policy_loss,
    dapo_loss_mask,
    group_advantages,
    informative_groups,
    k3_kl,
    kl_stats,
    legacy_pg_loss,
    logprob_gap_stats,
    masked_mean,
    shared_prefix_mask,
)
from lightning_rl.errors import ConfigError
from lightning_rl.methods.base import Plan, world
from lightning_rl.methods.grpo_config import GRPOConfig
from lightning_rl.methods.onpolicy import OnPolicyMethod, describe_reward, describe_rollout
from lightning_rl.rewards import RewardConfig
from lightning_rl.roles import PolicyModule, ReferenceModule
from lightning_rl.rollout import RolloutConfig
from lightning_rl.types import Trajectory

__all__ = ["GRPO", "GRPOConfig"]

# The top-up stream orders the corpus apart from the main stream: its epoch e is permuted with data_seed + this + e.
TOPUP_SEED_OFFSET = 1_000_003


class GRPO(OnPolicyMethod):
    """GRPO: group_size completions per prompt, group-relative advantages, a clipped (or REINFORCE) policy update."""

    method_name = "grpo"

    def __init__(
        self,
        policy: PolicyModule,
        reference: ReferenceModule | None = None,
        rollout: RolloutConfig | None = None,
        reward: RewardConfig | None = None,
        grpo: GRPOConfig | None = None,
        max_steps: int = 100,
    ) -> None:
        """
        Args:
            policy: the actor.
            reference: the frozen KL anchor; required exactly when grpo.kl_beta > 0.
            rollout: how completions are sampled and which engine samples them.
            reward: the terminal reward (a shared rule such as arithmetic, or a catalog entry).
            grpo: batch arithmetic, objective and dynamic-sampling knobs (Dr-GRPO, GSPO and DAPO are settings here).
            max_steps: outer iterations to run.
        """
        super().__init__(policy=policy, rollout=rollout, reward=reward, max_steps=max_steps)
        self.reference = reference
        self.grpo = grpo or GRPOConfig()
        self._check_couplings()
        self.grpo.apply_recipe_guard(self.policy.optimizer_config.eps)
        self._topup_order: Any = None

    def _check_couplings(self) -> None:
        cfg, rollout = self.grpo, self.rollout_config
        if cfg.temperature != rollout.temperature:
            raise ConfigError(
                f"model.grpo.temperature={cfg.temperature} differs from model.rollout.temperature="
                f"{rollout.temperature}: the policy must be scored at the temperature it was sampled at; set both to "
                "the same value"
            )
        if rollout.top_p != 1.0 or rollout.top_k > 0:
            raise ConfigError(
                f"model.rollout.top_p={rollout.top_p} / model.rollout.top_k={rollout.top_k}: GRPO refuses sampling "
                "warps, because the policy scores the untruncated distribution; set top_p=1.0 and top_k=-1"
            )
        if cfg.use_rollout_logprobs_for_loss and not (rollout.temperature == cfg.temperature == 1.0):
            raise ConfigError(
                "model.grpo.use_rollout_logprobs_for_loss=true needs model.rollout.temperature == "
                f"model.grpo.temperature == 1.0 (the engine returns untempered logprobs); got {rollout.temperature} "
                f"and {cfg.temperature}"
            )
        if cfg.kl_beta > 0 and self.reference is None:
            raise ConfigError(f"model.grpo.kl_beta={cfg.kl_beta} needs model.reference (the frozen KL anchor); set one")
        if cfg.kl_beta == 0 and self.reference is not None:
            raise ConfigError(
                "model.reference is set but model.grpo.kl_beta=0: the reference would be built and never used; "
                "remove model.reference or set model.grpo.kl_beta > 0"
            )

    # ----- roles and plan ---------------------------------------------------------------------------------------------
    def trainable_roles(self) -> list[Any]:
        return [self.policy]

    def frozen_roles(self) -> list[Any]:
        return [self.reference] if self.reference is not None else []

    def prompts_per_iteration(self) -> int:
        return self.grpo.groups_per_step

    def optimizer_steps_per_iteration(self) -> int:
        return self.grpo.n_mini

    def plan(self, world_size: int) -> Plan:
        cfg = self.grpo
        if cfg.groups_per_step % world_size:
            raise ConfigError(
                f"model.grpo.batch_size={cfg.batch_size} / model.grpo.group_size={cfg.group_size} = "
                f"{cfg.groups_per_step} prompts is not divisible by the {world_size} processes; each process must "
                "get the same number of whole groups"
            )
        if cfg.mini_batch % world_size:
            raise ConfigError(
                f"model.grpo.mini_batch_size={cfg.mini_batch} is not divisible by the {world_size} processes; each "
                "process must get the same number of trajectories per optimizer step"
            )
        mini_local = cfg.mini_batch // world_size
        if cfg.micro_batch_size and mini_local % cfg.micro_batch_size:
            raise ConfigError(
                f"model.grpo.micro_batch_size={cfg.micro_batch_size} does not divide the per-process mini-batch "
                f"({mini_local} = model.grpo.mini_batch_size / {world_size} processes)"
            )
        quota = cfg.effective_min_informative_groups
        plan = Plan("grpo", world_size)
        plan.lines.update(
            {
                "prompts per iteration": f"{cfg.groups_per_step} ({cfg.groups_per_step // world_size} per process)",
                "completions per prompt": cfg.group_size,
                "trajectories per iteration": cfg.batch_size,
                "optimizer steps per iteration": cfg.n_mini,
                "trajectories per optimizer step": f"{cfg.mini_batch} ({mini_local} per process)",
                "micro-batch per forward": cfg.micro_batch_size or mini_local,
                "surrogate": self._describe_surrogate(),
                "loss reduction": cfg.loss_type
                + (f" (max_tokens {self.rollout_config.max_tokens})" if cfg.loss_type.endswith("fixed") else ""),
                "advantage": "r - group mean (unbiased)" if cfg.unbiased_advantage else "(r - group mean) / group std",
                "kl": f"k3 to the reference, beta {cfg.kl_beta}, clamp {cfg.kl_coeff_clamp}" if cfg.kl_beta else "off",
                "loss masks": f"truncated {'masked' if cfg.mask_truncated_completions else 'trained'}, shared prefix "
                + (f">= {cfg.min_filter_prefix_tokens} tokens masked" if cfg.min_filter_prefix_tokens else "kept"),
                "dynamic sampling": f"quota {quota} of {cfg.groups_per_step} groups, up to "
                f"{cfg.dynamic_sampling_max_extra_rollouts} extra rounds, then "
                f"{cfg.dynamic_sampling_on_budget_exhausted}"
                if quota
                else "off",
                "iterations": self.max_steps,
                "rollout backend": describe_rollout(self.rollout_config),
                "reward": describe_reward(self.reward_config),
            }
        )
        return plan

    def _describe_surrogate(self) -> str:
        cfg = self.grpo
        if cfg.grpo_surrogate == "legacy_pg":
            return "legacy_pg (REINFORCE, no ratio)"
        old = "rollout logprobs" if cfg.use_rollout_logprobs_for_loss else "re-scored by the policy"
        dual = f", dual clip {cfg.lower_bound_ratio}" if cfg.lower_bound_ratio else ""
        return (
            f"clipped, {cfg.importance_sampling_level} ratio, epsilon {cfg.epsilon_low}/{cfg.epsilon_high}{dual}; "
            f"pi_old {old}"
        )

    # ----- the iteration ----------------------------------------------------------------------------------------------
    def run_iteration(self, batch: list[dict[str, Any]]) -> dict[str, float]:
        cfg = self.grpo
        traj = self.collect_scored(batch)
        metrics = self.rollout_metrics(traj)
        traj, sampling_metrics = self.dynamic_sampling(traj, len(batch))
        metrics.update(sampling_metrics)
        with self.phase("reference"):
            if self.reference is not None:
                traj.ref_logprobs = self.reference.score(traj, cfg.temperature, cfg.micro_batch_size)
        with self.phase("prepare"):
            loss_mask, prepare_metrics = self.prepare(traj)
        metrics.update(prepare_metrics)
        with self.phase("update"):
            metrics.update(self.update(traj, loss_mask))
        metrics.update(self.after_update(actor_changed=True))
        metrics["optim/policy_optimizer_step"] = float(self.role_steps.get("policy", 0))
        return metrics

    def collect_scored(self, batch: list[dict[str, Any]]) -> Trajectory:
        """group_size completions per prompt, with their rewards in ``scores``."""
        traj, rows = self.collect(batch, n=self.grpo.group_size)
        with self.phase("reward"):
            traj.scores = torch.tensor(self.score_rewards(traj, rows), dtype=torch.float32)
        return traj

    def dynamic_sampling(self, traj: Trajectory, prompts: int) -> tuple[Trajectory, dict[str, float]]:
        """DAPO dynamic sampling (arXiv 2503.14476, sec. 3.2): top up until the trained batch holds the quota.

        The quota counts informative groups (reward spread > 0) over all processes; every process runs the same number
        of rounds because the decision is taken on the all-reduced count. The batch is assembled informative groups
        first, tied groups as zero-advantage filler, at this process's ``prompts`` groups.
        """
        cfg = self.grpo
        quota = cfg.effective_min_informative_groups
        parts = [traj]
        ids, flags = _group_flags(traj)
        rounds = 0
        while True:
            in_batch = _global_sum(min(sum(flags), prompts))
            if quota == 0 or in_batch >= quota or rounds >= cfg.dynamic_sampling_max_extra_rollouts:
                break
            rounds += 1
            extra = self.collect_scored(self.draw_prompts(prompts, rounds))
            assert extra.group_ids is not None
            extra.group_ids = extra.group_ids + rounds * prompts  # unique across rounds, still in arrival order
            parts.append(extra)
            extra_ids, extra_flags = _group_flags(extra)
            ids, flags = ids + extra_ids, flags + extra_flags
        shortfall = max(0, quota - int(in_batch))
        if shortfall and cfg.dynamic_sampling_on_budget_exhausted == "raise":
            raise RuntimeError(
                f"iteration {self.iteration + 1}: dynamic sampling found {int(in_batch)} informative groups after "
                f"{rounds} extra rounds (model.grpo.dynamic_sampling_max_extra_rollouts="
                f"{cfg.dynamic_sampling_max_extra_rollouts}), below the quota of {quota} "
                "(model.grpo.effective_min_informative_groups); the reward cannot separate the completions. Check the "
                "reward, lower the quota, raise the budget, or set "
                "model.grpo.dynamic_sampling_on_budget_exhausted=proceed"
            )
        if rounds:
            merged = concat_trajectories(parts, self.tokenizer.pad_token_id)
            assert merged.group_ids is not None
            chosen = torch.tensor([ids[i] for i in assemble_groups(flags, prompts)], dtype=torch.long)
            traj = merged[torch.isin(merged.group_ids, chosen)]
        return traj, {
            "train/grpo_informative_groups": in_batch,
            "train/grpo_dynamic_sampling_extra_rollouts": float(rounds),
            "train/grpo_dynamic_sampling_shortfall": float(shortfall),
        }

    def draw_prompts(self, k: int, round_index: int = 1) -> list[dict[str, Any]]:
        """``k`` more prompt rows for this process: one dynamic-sampling top-up round.

        The rows come from the data module's corpus (``trainer.datamodule.source``) in a second, shuffled order, the
        top-up stream, which leaves the main data cursor alone: round j of iteration i takes a fixed slice of that
        stream, so the rows are a pure function of (data seed, i, j, process) and a resumed run draws the same ones.
        Override this hook to top up from somewhere else.
        """
        from lightning_rl.data.stream import EpochOrder

        datamodule = getattr(self.trainer, "datamodule", None)
        source = getattr(datamodule, "source", None)
        if source is None:
            raise RuntimeError(
                "dynamic sampling draws extra prompts from the trainer's data module, but it has no loaded prompt "
                "source; use lightning_rl.data.PromptDataModule or override GRPO.draw_prompts"
            )
        if self._topup_order is None or self._topup_order.num_rows != len(source):
            seed = int(getattr(datamodule, "data_seed", 0)) + TOPUP_SEED_OFFSET
            self._topup_order = EpochOrder(len(source), shuffle=True, data_seed=seed)
        rank, size = world()
        slot = self.iteration * self.grpo.dynamic_sampling_max_extra_rollouts + round_index - 1
        rows = []
        for i in range(k):
            epoch, index = self._topup_order.index(slot * k * size + rank + i * size)
            rows.append({**source[index], "_index": index, "_epoch": epoch})
        return rows

    @torch.no_grad()
    def prepare(self, traj: Trajectory) -> tuple[torch.Tensor, dict[str, float]]:
        """Group advantages, pi_old and the loss mask (DAPO's masks never touch ``response_mask``, the forward's
        attention). Returns the loss mask [B, T] and its metrics."""
        cfg = self.grpo
        assert traj.scores is not None and traj.group_ids is not None and traj.truncated is not None
        traj.advantages = group_advantages(traj.scores, traj.group_ids, unbiased=cfg.unbiased_advantage)
        loss_mask = traj.response_mask.bool()
        if cfg.mask_truncated_completions:
            loss_mask = dapo_loss_mask(loss_mask, traj.truncated)
        if cfg.min_filter_prefix_tokens is not None:
            loss_mask = shared_prefix_mask(
                traj.response_ids, loss_mask, traj.group_ids, traj.scores, cfg.min_filter_prefix_tokens
            )
        metrics: dict[str, float] = {}
        if cfg.grpo_surrogate == "clipped":
            if cfg.use_rollout_logprobs_for_loss:
                traj.old_logprobs = traj.rollout_logprobs
            else:
                traj.old_logprobs = self.policy.score(traj, cfg.temperature, cfg.micro_batch_size)
                assert traj.rollout_logprobs is not None
                gap = logprob_gap_stats(traj.old_logprobs, traj.rollout_logprobs, loss_mask)
                metrics["train/logprob_gap_mean"] = float(gap.mean)
                metrics["train/logprob_gap_abs_mean"] = float(gap.abs_mean)
                metrics["train/logprob_gap_max"] = float(gap.max_abs)
        return loss_mask, metrics

    def update(self, traj: Trajectory, loss_mask: torch.Tensor) -> dict[str, float]:
        """n_mini optimizer steps over one shuffle of the batch; metrics are weighted over all their chunks."""
        opt, sched = self.optimizers(), self.lr_schedulers()
        n = traj.batch_size[0]
        mini = self.grpo.mini_batch // self.world_size
        order = torch.randperm(n, generator=self.shuffle_generator(0))
        stats = _Stats()
        for start in range(0, n, mini):
            idx = order[start : start + mini]
            self.policy_step(traj[idx], loss_mask[idx], opt, sched, stats, first=start == 0)
        metrics = stats.metrics()
        if "train/valid_sequence_count" in metrics:
            metrics["train/valid_sequence_count"] = _global_sum(metrics["train/valid_sequence_count"])
        if self.grpo.kl_beta > 0:
            metrics["train/kl_beta"] = self.grpo.kl_beta
        return metrics

    def policy_step(self, mb: Trajectory, mask: torch.Tensor, opt: Any, sched: Any, stats: _Stats, first: bool) -> None:
        """One optimizer step: chunks accumulate their exact share of the window loss (divisor fixed up front)."""
        cfg = self.grpo
        max_tokens = self.rollout_config.max_tokens
        acc = LossAccumulator(cfg.loss_type, max_tokens)  # type: ignore[arg-type]
        divisor = float(acc.window_divisor(mask))
        size = cfg.micro_batch_size or mb.batch_size[0]
        window_loss = 0.0
        for start in range(0, mb.batch_size[0], size):
            chunk, cmask = mb[start : start + size], mask[start : start + size]
            # A chunk's own reduction times (its divisor / the window's) is its exact part of the window loss.
            share = float(acc.window_divisor(cmask)) / divisor
            tokens = float(cmask.sum())
            logp, entropy = self.policy.forward_logprobs(chunk, cfg.temperature, with_entropy=True)
            assert entropy is not None and chunk.advantages is not None
            if cfg.grpo_surrogate == "clipped":
                loss, s = clipped_policy_loss(
                    logp,
                    chunk.old_logprobs,
                    chunk.advantages,
                    cmask,
                    epsilon_low=cfg.epsilon_low,
                    epsilon_high=cfg.epsilon_high,
                    lower_bound_ratio=cfg.lower_bound_ratio,
                    importance_sampling_level=cfg.importance_sampling_level,  # type: ignore[arg-type]
                    loss_type=cfg.loss_type,  # type: ignore[arg-type]
                    max_tokens=max_tokens,
                )
                valid = float(s.valid_sequence_count)
                stats.mean("train/clip_frac", s.clip_frac, tokens)
                stats.mean("train/ratio_absdev", s.ratio_absdev, tokens)
                stats.mean("train/seq_clip_frac", s.seq_clip_frac, valid)
                stats.mean("train/seq_log_ratio_abs", s.seq_log_ratio_abs, valid)
                stats.total("train/valid_sequence_count", valid)
            else:
                loss = legacy_pg_loss(logp, chunk.advantages, cmask, cfg.loss_type, max_tokens)  # type: ignore[arg-type]
            total = loss
            if cfg.kl_beta > 0:
                assert chunk.ref_logprobs is not None
                kl = k3_kl(logp, chunk.ref_logprobs, clamp=cfg.kl_coeff_clamp)
                # The penalty joins every trained token's loss, so it takes the surrogate's reduction.
                total = loss + cfg.kl_beta * aggregate_loss(kl, cmask, cfg.loss_type, max_tokens)  # type: ignore[arg-type]
                kl_mean, kl_max = kl_stats(kl, cmask)
                stats.mean("train/kl_mean", kl_mean, tokens)
                stats.max("train/kl_max", kl_max)
            self.manual_backward(total * share)
            window_loss += float(loss.detach()) * share
            stats.mean("train/entropy", masked_mean(entropy.detach(), cmask), tokens)
            if first and gap_from_update(cfg):
                # No separate pi_old pass: the first step's forwards (the weights that sampled) measure the gap.
                assert chunk.rollout_logprobs is not None
                gap = logprob_gap_stats(logp, chunk.rollout_logprobs, cmask)
                stats.mean("train/logprob_gap_mean", gap.mean, tokens)
                stats.mean("train/logprob_gap_abs_mean", gap.abs_mean, tokens)
                stats.max("train/logprob_gap_max", gap.max_abs)
        grad_norm = self.role_optimizer_step("policy", self.policy.model, opt, sched, self.policy.optimizer_config)
        stats.mean("train/policy_loss", window_loss, 1.0)
        stats.mean("train/grad_norm_policy", grad_norm, 1.0)


class _Stats:
    """Weighted means, maxima and totals of the per-chunk statistics of one iteration's update."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.out: dict[str, float] = {}

    def mean(self, key: str, value: float | torch.Tensor, weight: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + float(value) * weight
        self.weights[key] = self.weights.get(key, 0.0) + weight

    def max(self, key: str, value: float | torch.Tensor) -> None:
        self.out[key] = max(self.out.get(key, 0.0), float(value))

    def total(self, key: str, value: float) -> None:
        self.out[key] = self.out.get(key, 0.0) + value

    def metrics(self) -> dict[str, float]:
        means = {k: v / self.weights[k] if self.weights[k] else 0.0 for k, v in self.sums.items()}
        return {**means, **self.out}


def gap_from_update(cfg: GRPOConfig) -> bool:
    """Whether the train/infer gap is measured in the update (there is no separate pi_old scoring pass)."""
    return cfg.grpo_surrogate == "legacy_pg" or cfg.use_rollout_logprobs_for_loss


def _group_flags(traj: Trajectory) -> tuple[list[int], list[bool]]:
    """The group ids of ``traj`` in ascending (= arrival) order, and whether each group is informative."""
    assert traj.scores is not None and traj.group_ids is not None
    ids = torch.unique(traj.group_ids).tolist()
    return ids, [bool(f) for f in informative_groups(traj.scores, traj.group_ids).tolist()]


def _global_sum(value: float) -> float:
    """Sum over processes (identical on every rank afterwards, so the metrics' rank mean keeps it)."""
    if world()[1] == 1:
        return float(value)
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


def concat_trajectories(parts: Sequence[Trajectory], pad_id: int) -> Trajectory:
    """Concatenate freshly collected trajectories of different widths (prompts left-padded, responses right-padded).

    Only the fields a rollout and its rewards set are carried (the iteration concatenates before anything else).
    """
    if len(parts) == 1:
        return parts[0]
    p = max(t.prompt_ids.shape[1] for t in parts)
    w = max(t.response_ids.shape[1] for t in parts)

    def left(x: torch.Tensor, fill: float | int | bool) -> torch.Tensor:
        return torch.nn.functional.pad(x, (p - x.shape[1], 0), value=fill)

    def right(x: torch.Tensor, fill: float | int | bool) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, w - x.shape[1]), value=fill)

    def cat(name: str) -> torch.Tensor:
        return torch.cat([getattr(t, name) for t in parts])

    return Trajectory(
        prompt_ids=torch.cat([left(t.prompt_ids, pad_id) for t in parts]),
        prompt_mask=torch.cat([left(t.prompt_mask, False) for t in parts]),
        response_ids=torch.cat([right(t.response_ids, pad_id) for t in parts]),
        response_mask=torch.cat([right(t.response_mask, False) for t in parts]),
        rollout_logprobs=torch.cat([right(t.rollout_logprobs, 0.0) for t in parts]),  # type: ignore[arg-type]
        scores=cat("scores"),
        group_ids=cat("group_ids"),
        truncated=cat("truncated"),
        texts=[text for t in parts for text in (t.texts or [])],
        batch_size=[sum(t.batch_size[0] for t in parts)],
    )
