"""``GRPOConfig``: the ``model.grpo`` knobs of the GRPO family (GRPO, Dr-GRPO, GSPO, DAPO) and their refusals.

One dataclass for the whole family: Dr-GRPO, GSPO and DAPO are settings of these knobs (the YAML layers in
``recipes/``), not separate methods. Refusals that need another group (the rollout temperature, the reference, the
policy's optimizer) live in ``GRPO.__init__``; everything that reads only these knobs is checked here.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from lightning_rl.algorithms import LOSS_TYPES, informative_quota
from lightning_rl.errors import ConfigError

KEY = "model.grpo"
SURROGATES = ("clipped", "legacy_pg")
IS_LEVELS = ("token", "sequence")
ON_EXHAUSTED = ("raise", "proceed")
SEVERITIES = ("warn", "error")
FIXED_LOSS_TYPE = "seq-mean-token-sum-fixed"
FIXED_LOSS_MAX_EPS = 1e-7
SEQUENCE_EPSILON_WARN = 0.05

# The knobs only the clipped surrogate reads, with their defaults: legacy_pg refuses any other value rather than
# record a setting its loss ignores.
CLIPPED_ONLY = {
    "epsilon_low": 0.2,
    "epsilon_high": 0.2,
    "lower_bound_ratio": 3.0,
    "importance_sampling_level": "token",
    "kl_beta": 0.0,
    "kl_coeff_clamp": None,
    "mask_truncated_completions": False,
    "use_rollout_logprobs_for_loss": False,
}


def _choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{KEY}.{key} must be one of {', '.join(choices)}; got {value!r}")


@dataclass
class GRPOConfig:
    """Batch arithmetic, objective and dynamic-sampling knobs of the GRPO family."""

    batch_size: int = 32
    """Trajectories per iteration over all processes (the spec's batch_per_replica); a positive multiple of group_size.
    batch_size / group_size prompts are drawn per iteration."""
    group_size: int = 8
    """Completions sampled per prompt; advantages are relative to the prompt's group."""
    mini_batch_size: int = 0
    """Trajectories per optimizer step over all processes; 0 = the whole batch. Must divide batch_size; the iteration
    takes n_mini = batch_size / mini_batch_size optimizer steps."""
    micro_batch_size: int = 0
    """Trajectories per forward/backward on one process; 0 = the whole per-process mini-batch. Memory only: the loss
    divisor is fixed once per optimizer step, so the update does not depend on it."""
    mu_iterations: int = 1
    """Optimizer passes per collected batch; only 1 is accepted (reuse is expressed through mini_batch_size)."""
    grpo_surrogate: str = "clipped"
    """Policy-gradient surrogate: clipped (frozen pi_old, PPO-style clip) or legacy_pg (plain REINFORCE, for toy and
    parity runs; refuses every clipped-only knob set away from its default)."""
    temperature: float = 1.0
    """Temperature dividing the policy logits when scoring; must equal model.rollout.temperature. 0 and (0, 0.01) are
    refused."""
    loss_type: str = "token-mean"
    """Loss reduction: token-mean, seq-mean-token-sum, seq-mean-token-mean, or Dr-GRPO's seq-mean-token-sum-fixed
    (divides by sequences x model.rollout.max_tokens)."""
    epsilon_low: float = 0.2
    """Lower clip bound of the ratio (1 - epsilon_low); negative disables that side."""
    epsilon_high: float = 0.2
    """Upper clip bound of the ratio (1 + epsilon_high); negative disables that side (DAPO's clip-higher raises it)."""
    lower_bound_ratio: float = 3.0
    """Dual-clip bound for negative-advantage tokens (> 1); 0 disables it. Must be 0 under importance_sampling_level
    sequence."""
    importance_sampling_level: str = "token"
    """token: one ratio per token (GRPO); sequence: one ratio per response, exp of its mean token log-ratio (GSPO)."""
    kl_beta: float = 0.0
    """Scale of the k3 KL penalty to the frozen reference added to every trained token's loss; > 0 requires
    model.reference, and a reference requires kl_beta > 0."""
    kl_coeff_clamp: float | None = None
    """Bound (nats) on the k3 term's per-token gradient coefficient, in (0, 20); the value stays exact k3. Requires
    kl_beta > 0. null keeps the exact, unbounded gradient."""
    unbiased_advantage: bool = False
    """false: (r - group mean) / group std; true: r - group mean without the std division (Dr-GRPO)."""
    use_rollout_logprobs_for_loss: bool = False
    """Use the rollout engine's logprobs as pi_old instead of re-scoring the batch with the policy; requires
    model.rollout.temperature == temperature == 1.0."""
    min_filter_prefix_tokens: int | None = None
    """Mask the shared response prefix (at least this many tokens) of group members whose rewards differ; null = off."""
    mask_truncated_completions: bool = False
    """DAPO overlong filtering: completions cut at max_tokens leave the loss (their reward still counts in the group's
    statistics). Clipped surrogate only."""
    min_informative_groups: int = 0
    """Dynamic sampling quota as a literal count of groups with a reward spread over the whole iteration; 0 = off."""
    min_informative_groups_frac: float | None = None
    """The quota as a share of groups_per_step, in (0, 1]: max(1, ceil(frac x groups_per_step)); 1.0 = full DAPO.
    Refused together with a literal min_informative_groups > 0."""
    dynamic_sampling_max_extra_rollouts: int = 4
    """Top-up budget: extra rounds of batch_size / group_size prompts an iteration may draw to reach the quota."""
    dynamic_sampling_on_budget_exhausted: str = "raise"
    """When the budget is spent below the quota: raise (stop the run) or proceed (train with tied groups as
    zero-advantage filler and log the shortfall)."""
    recipe_guard_severity: str = "warn"
    """How the recipe-hygiene checks report: warn, or error (collect every hazard and refuse in one message)."""

    def __post_init__(self) -> None:
        self._check_batch()
        self._check_objective()
        self._check_dynamic_sampling()

    # ----- refusals ---------------------------------------------------------------------------------------------------
    def _check_batch(self) -> None:
        if self.group_size < 2:
            raise ConfigError(
                f"{KEY}.group_size must be >= 2: a group of one has no baseline, so its advantage is 0 "
                f"(got {self.group_size})"
            )
        if self.batch_size < 1 or self.batch_size % self.group_size:
            raise ConfigError(
                f"{KEY}.batch_size={self.batch_size} must be a positive multiple of {KEY}.group_size="
                f"{self.group_size} (each prompt contributes one whole group)"
            )
        if self.mini_batch_size < 0 or self.micro_batch_size < 0:
            raise ConfigError(f"{KEY}.mini_batch_size and {KEY}.micro_batch_size must be >= 0 (0 = the whole batch)")
        if self.mini_batch_size and self.batch_size % self.mini_batch_size:
            raise ConfigError(
                f"{KEY}.mini_batch_size={self.mini_batch_size} does not divide {KEY}.batch_size={self.batch_size}; "
                "choose a mini-batch that divides the batch (no ragged last optimizer step)"
            )
        if self.micro_batch_size and self.mini_batch % self.micro_batch_size:
            raise ConfigError(
                f"{KEY}.micro_batch_size={self.micro_batch_size} does not divide the mini-batch span "
                f"({self.mini_batch} trajectories)"
            )
        if self.mu_iterations != 1:
            raise ConfigError(
                f"{KEY}.mu_iterations={self.mu_iterations} is refused: only 1 is supported; reuse a batch for several "
                f"optimizer steps with {KEY}.mini_batch_size instead"
            )

    def _check_objective(self) -> None:
        _choice("grpo_surrogate", self.grpo_surrogate, SURROGATES)
        _choice("importance_sampling_level", self.importance_sampling_level, IS_LEVELS)
        _choice("recipe_guard_severity", self.recipe_guard_severity, SEVERITIES)
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"{KEY}.loss_type must be one of {', '.join(LOSS_TYPES)}; got {self.loss_type!r}")
        t = self.temperature
        if not (math.isfinite(t) and t >= 0.01):
            raise ConfigError(
                f"{KEY}.temperature={t} is refused: the policy is scored at a positive temperature of at least 0.01 "
                "(0 is greedy and has no sampling distribution; vLLM rewrites (0, 0.01) to 0.01)"
            )
        if self.lower_bound_ratio != 0 and not self.lower_bound_ratio > 1:
            raise ConfigError(f"{KEY}.lower_bound_ratio must be 0 (off) or > 1, got {self.lower_bound_ratio}")
        if self.kl_beta < 0 or not math.isfinite(self.kl_beta):
            raise ConfigError(f"{KEY}.kl_beta must be a finite number >= 0, got {self.kl_beta}")
        if self.kl_coeff_clamp is not None:
            if not 0 < self.kl_coeff_clamp < 20:
                raise ConfigError(
                    f"{KEY}.kl_coeff_clamp must be in (0, 20) nats, got {self.kl_coeff_clamp}: the +-20 log-ratio "
                    "clamp already zeroes the gradient beyond 20"
                )
            if self.kl_beta <= 0:
                raise ConfigError(f"{KEY}.kl_coeff_clamp={self.kl_coeff_clamp} requires {KEY}.kl_beta > 0")
        if self.min_filter_prefix_tokens is not None and self.min_filter_prefix_tokens < 1:
            raise ConfigError(
                f"{KEY}.min_filter_prefix_tokens must be null (off) or >= 1, got {self.min_filter_prefix_tokens}"
            )
        if self.grpo_surrogate == "legacy_pg":
            changed = [f"{KEY}.{k}={getattr(self, k)}" for k, d in CLIPPED_ONLY.items() if getattr(self, k) != d]
            if changed:
                raise ConfigError(
                    f"{KEY}.grpo_surrogate=legacy_pg refuses clipped-only settings its loss would ignore: "
                    f"{', '.join(changed)}; reset them to their defaults or use {KEY}.grpo_surrogate=clipped"
                )
            if self.n_mini > 1:
                warnings.warn(
                    f"{KEY}.grpo_surrogate=legacy_pg with {self.n_mini} optimizer steps per iteration: legacy_pg has "
                    "no importance ratio, so every step after the first trains on off-policy samples",
                    UserWarning,
                    stacklevel=3,
                )
        if self.importance_sampling_level == "sequence":
            self._check_sequence_level()
        if self.kl_beta > 0 and self.kl_coeff_clamp is None:
            warnings.warn(
                f"{KEY}.kl_beta={self.kl_beta} without {KEY}.kl_coeff_clamp: the exact k3 gradient is unbounded, so "
                "one token whose reference disagrees by a few nats can own the step; 5.0 bounds it at exp(5) - 1",
                UserWarning,
                stacklevel=3,
            )

    def _check_sequence_level(self) -> None:
        if self.lower_bound_ratio != 0:
            raise ConfigError(
                f"{KEY}.lower_bound_ratio={self.lower_bound_ratio} is refused under {KEY}.importance_sampling_level="
                f"sequence: the response ratio has no dual clip; set {KEY}.lower_bound_ratio=0"
            )
        largest = max((e for e in (self.epsilon_low, self.epsilon_high) if e >= 0), default=None)
        if largest is not None and largest > SEQUENCE_EPSILON_WARN:
            warnings.warn(
                f"{KEY}.importance_sampling_level=sequence with epsilon {largest} > {SEQUENCE_EPSILON_WARN}: the "
                "sequence ratio bounds a response-mean log-ratio, far smaller than a token's, so this clip almost "
                "never acts (GSPO uses epsilon_low=3e-4, epsilon_high=4e-4)",
                UserWarning,
                stacklevel=4,
            )
        if self.n_mini == 1 and not self.use_rollout_logprobs_for_loss:
            warnings.warn(
                f"{KEY}.importance_sampling_level=sequence with one optimizer step per iteration and pi_old re-scored "
                "by the policy: every response ratio is exactly 1, so this trains as token-level GRPO; set "
                f"{KEY}.mini_batch_size below {KEY}.batch_size",
                UserWarning,
                stacklevel=4,
            )

    def _check_dynamic_sampling(self) -> None:
        _choice("dynamic_sampling_on_budget_exhausted", self.dynamic_sampling_on_budget_exhausted, ON_EXHAUSTED)
        if self.dynamic_sampling_max_extra_rollouts < 0:
            raise ConfigError(
                f"{KEY}.dynamic_sampling_max_extra_rollouts must be >= 0 (extra rounds), got "
                f"{self.dynamic_sampling_max_extra_rollouts}"
            )
        if self.min_informative_groups > 0 and self.min_informative_groups_frac is not None:
            raise ConfigError(
                f"set either {KEY}.min_informative_groups or {KEY}.min_informative_groups_frac, not both (got "
                f"{self.min_informative_groups} and {self.min_informative_groups_frac}); leave the literal at 0"
            )
        frac = self.min_informative_groups_frac
        if frac is not None and not 0 < frac <= 1:
            raise ConfigError(f"{KEY}.min_informative_groups_frac must be in (0, 1], got {frac}")
        if self.min_informative_groups < 0 or self.min_informative_groups > self.groups_per_step:
            raise ConfigError(
                f"{KEY}.min_informative_groups={self.min_informative_groups} must be in [0, groups_per_step="
                f"{self.groups_per_step}] ({KEY}.batch_size // {KEY}.group_size): the batch cannot hold more groups"
            )

    # ----- derived ----------------------------------------------------------------------------------------------------
    @property
    def groups_per_step(self) -> int:
        """Groups (= prompts) one iteration trains on: batch_size // group_size."""
        return self.batch_size // self.group_size

    @property
    def effective_min_informative_groups(self) -> int:
        """The informative-group quota dynamic sampling enforces (0 = off): the literal count, or the fraction's
        max(1, ceil(frac x groups_per_step))."""
        return informative_quota(self.groups_per_step, self.min_informative_groups, self.min_informative_groups_frac)

    @property
    def mini_batch(self) -> int:
        return self.mini_batch_size or self.batch_size

    @property
    def n_mini(self) -> int:
        """Optimizer steps per iteration."""
        return self.batch_size // self.mini_batch

    def recipe_hazards(self, optimizer_eps: float) -> list[str]:
        """The recipe-hygiene pairings this config makes with the policy's Adam ``optimizer_eps`` (empty = none)."""
        hazards = []
        literal = self.min_informative_groups
        if 0 < literal and 2 * literal < self.groups_per_step:
            hazards.append(
                f"{KEY}.min_informative_groups={literal} is below half of groups_per_step={self.groups_per_step} "
                f"({KEY}.batch_size // {KEY}.group_size): the count is global and does not grow with the batch, so "
                f"this is dynamic sampling in name only; prefer {KEY}.min_informative_groups_frac, which scales"
            )
        if self.loss_type == FIXED_LOSS_TYPE and optimizer_eps > FIXED_LOSS_MAX_EPS:
            hazards.append(
                f"{KEY}.loss_type={FIXED_LOSS_TYPE} with model.policy.optimizer.eps={optimizer_eps:g} > "
                f"{FIXED_LOSS_MAX_EPS:g}: the fixed divisor shrinks the gradients below Adam's eps, so the step "
                "follows lr / eps rather than lr; set model.policy.optimizer.eps=1e-8 (as recipes/dr_grpo.yaml does)"
            )
        return hazards

    def apply_recipe_guard(self, optimizer_eps: float) -> None:
        """Warn about each hazard, or refuse them all in ONE ConfigError under recipe_guard_severity=error."""
        hazards = self.recipe_hazards(optimizer_eps)
        if not hazards:
            return
        if self.recipe_guard_severity == "error":
            raise ConfigError(
                "\n\n".join(hazards) + f"\n\n{KEY}.recipe_guard_severity=error refuses these pairings; fix them or set "
                "it to warn."
            )
        for hazard in hazards:
            warnings.warn(hazard, UserWarning, stacklevel=3)
