"""The machinery PPO and the GRPO family share: engines, collection, rewards, optimizer steps, weight publication."""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from collections.abc import Iterator
from typing import Any

import torch

from lightning_rl.errors import ConfigError
from lightning_rl.methods.base import RLMethod, world
from lightning_rl.methods.trajectory import build_trajectory, render_prompts
from lightning_rl.rewards import RewardConfig
from lightning_rl.roles import PolicyModule
from lightning_rl.rollout import RolloutConfig
from lightning_rl.rollout.base import check_fresh
from lightning_rl.types import Trajectory


class OnPolicyMethod(RLMethod):
    """Base of the on-policy methods: owns the policy, the rollout engine and the reward function."""

    def __init__(
        self,
        policy: PolicyModule,
        rollout: RolloutConfig | None = None,
        reward: RewardConfig | None = None,
        max_steps: int = 100,
    ) -> None:
        super().__init__(max_steps=max_steps)
        self.policy = policy
        self.rollout_config = rollout or RolloutConfig()
        self.reward_config = reward or RewardConfig()
        self.engine: Any = None
        self.reward_fn: Any = None

    # ----- lifecycle --------------------------------------------------------------------------------------------------
    def rows_per_iteration(self) -> int:
        return self.prompts_per_iteration()

    @abstractmethod
    def prompts_per_iteration(self) -> int:
        """Prompts per iteration over all processes (the data module gets this divided by the process count)."""

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self.reward_fn = self.reward_config.build()
        self.engine = self.build_engine()

    def build_engine(self):
        from lightning_rl.rollout.build import build_engine
        from lightning_rl.rollout.hf import HFRolloutEngine

        engine = build_engine(
            self.rollout_config,
            self.policy.model_path,
            hf_engine_factory=lambda: HFRolloutEngine(lambda: self.policy.model, self.tokenizer),
        )
        engine.version = self.policy_version
        return engine

    def close_engine(self) -> None:
        if self.engine is not None:
            engine, self.engine = self.engine, None
            engine.close()

    def teardown(self, stage: str) -> None:
        self.close_engine()

    @property
    def world_size(self) -> int:
        return world()[1]

    # ----- collection -------------------------------------------------------------------------------------------------
    def collect(self, batch: list[dict[str, Any]], n: int) -> tuple[Trajectory, list[dict[str, Any]]]:
        """Sample ``n`` completions per prompt; returns the trajectory and the row behind each completion."""
        with self.phase("rollout"):
            prompt_ids = render_prompts(self.tokenizer, batch)
            if self.rollout_config.colocated_offload:
                self.engine.wake_up()
            completions = self.engine.generate(prompt_ids, self.rollout_config.sampling(n=n))
            if self.rollout_config.colocated_offload:
                self.engine.sleep()
            check_fresh(completions, self.policy_version)
            traj = build_trajectory(completions, self.tokenizer.pad_token_id)
        rows = [batch[c.prompt_index] for c in completions]
        return traj, rows

    def score_rewards(self, traj: Trajectory, rows: list[dict[str, Any]]) -> list[float]:
        assert traj.texts is not None and traj.group_ids is not None
        return self.reward_fn(list(traj.texts), rows, group_ids=traj.group_ids.tolist())

    def rollout_metrics(self, traj: Trajectory) -> dict[str, float]:
        lengths = traj.response_lengths.float()
        assert traj.scores is not None and traj.truncated is not None
        return {
            "train/reward_mean": float(traj.scores.mean()),
            "train/reward_std": float(traj.scores.std(unbiased=False)),
            "train/response_len_mean": float(lengths.mean()),
            "train/response_len_max": float(lengths.max()),
            "train/rollout_truncated_frac": float(traj.truncated.float().mean()),
        }

    # ----- updates ----------------------------------------------------------------------------------------------------
    def shuffle_generator(self, epoch: int) -> torch.Generator:
        """The minibatch shuffle of (iteration, epoch): moves every iteration, identical across reruns."""
        key = f"{self.trainer.world_size if self._trainer else 1}:{self.iteration}:{epoch}:{world()[0]}"
        seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & (2**63 - 1)
        return torch.Generator().manual_seed(seed)

    def chunks(self, mb: Trajectory, micro_batch_size: int, loss_type: str) -> Iterator[tuple[Trajectory, float]]:
        """Micro-batches of a minibatch, each with its share of the window's loss divisor.

        Every reduction is a sum over the window divided once: token-mean by the window's tokens, the seq-mean-* modes
        by
        its (non-empty) sequences. A chunk's own reduction times its share is its exact part of the window loss, so the
        micro-batch size never changes the update.
        """
        size = micro_batch_size
        n = mb.batch_size[0]
        if size <= 0 or size >= n:
            yield mb, 1.0
            return
        token_mode = loss_type == "token-mean"

        def amount(t: Trajectory) -> float:
            m = t.response_mask
            return float(m.sum()) if token_mode else float((m.sum(-1) > 0).sum())

        total = amount(mb)
        for start in range(0, n, size):
            chunk = mb[start : start + size]
            # an empty chunk still runs (share 0): under FSDP2 every rank must run the same number of forwards
            yield chunk, (amount(chunk) / total if total else 0.0)

    def after_update(self, actor_changed: bool) -> dict[str, float]:
        """Publish the actor: bump policy_version and sync the engine, only when the actor's weights changed."""
        if not actor_changed:
            return {}
        self.policy_version += 1
        with self.phase("weight_sync"):
            if self.rollout_config.backend == "hf":
                self.engine.update_weights((), self.policy_version)
                return {}
            from lightning_rl.weight_sync import sync

            assert self.policy.model is not None
            return sync(
                self.policy.model,
                self.engine,
                self.policy_version,
                bucket_bytes=self.rollout_config.weight_sync_bucket_bytes,
            )


def check_scoring_temperature(rollout: RolloutConfig, key: str) -> None:
    if rollout.temperature <= 0:
        raise ConfigError(f"{key}: on-policy training needs rollout.temperature > 0, got {rollout.temperature}")


def describe_rollout(rollout: RolloutConfig) -> str:
    where = {"hf": "transformers generate on the policy", "vllm": "in-process vLLM engine"}.get(
        rollout.backend, f"{rollout.replicas} vLLM engine(s) as Ray actors"
    )
    return (
        f"{rollout.backend} ({where}); temperature {rollout.temperature}, top_p {rollout.top_p}, "
        f"top_k {rollout.top_k}, max_tokens {rollout.max_tokens}"
    )


def describe_reward(reward: RewardConfig) -> str:
    if reward.terminal_callable:
        text = f"terminal_callable {reward.terminal_callable}"
    else:
        text = f"{reward.terminal} (correct {reward.correct_reward}, incorrect {reward.incorrect_reward})"
    return text + (f", process {reward.process}" if reward.process != "none" else "")
