"""``RewardConfig``: the ``model.reward`` config group, its cross-knob refusals, and the data-side needs check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lightning_rl.errors import ConfigError
from lightning_rl.rewards import registry
from lightning_rl.rewards.function import RewardFunction, check_scale, function_for
from lightning_rl.rewards.provider import AnyProvider

KEY = "model.reward"
"""The config path of this group as the user writes it (``--model.reward.terminal``), used to name keys in messages.
The spec's ``rl.reward.*`` keys are these."""

PROCESS_MODES: tuple[str, ...] = ("linear", "none")


@dataclass
class RewardConfig:
    """How completions are scored: one terminal (episode-level) reward, plus an optional per-token process term."""

    terminal: str = "arithmetic_exact_match"
    """Episode-level verifier: PPO's own matcher (arithmetic_exact_match, none), a shared rule (arithmetic, gsm8k,
    countdown, exact_match, nonempty, constant) or an entry of the catalog."""
    terminal_callable: str | None = None
    """Escape hatch 'package.module:callable' called as fn(completions, references, prompts, rows) -> floats, returned
    unscaled. Overrides PPO's own matcher; refused together with a shared rule or catalog name."""
    correct_reward: float = 1.0
    """Reward for a completion the rule scores correct (a rule's 1.0)."""
    incorrect_reward: float = 0.0
    """Reward for a completion the rule scores incorrect (a rule's 0.0)."""
    process: Literal["linear", "none"] = "none"
    """Per-token shaping term, kept separate from the terminal reward: linear spreads the terminal score over the
    response tokens with weights growing linearly with position (see docs/rewards.md); none adds nothing."""
    catalog: str | None = None
    """reward_provider_catalog: 'package.module:factory', a zero-argument factory returning {name: provider} of extra
    pointwise or group-level providers; names may not override built-ins."""

    def __post_init__(self) -> None:
        # Cheap checks only: nothing here imports user code (validate_imports does).
        check_scale(self.correct_reward, self.incorrect_reward, KEY)
        if self.process not in PROCESS_MODES:
            raise ConfigError(f"{KEY}.process={self.process!r}: expected one of {', '.join(PROCESS_MODES)}")
        for key, path in (("terminal_callable", self.terminal_callable), ("catalog", self.catalog)):
            if path is not None and (path.count(":") != 1 or not all(path.split(":"))):
                raise ConfigError(f"{KEY}.{key}={path!r}: expected 'package.module:callable'")
        if self.terminal_callable is not None and self.terminal not in registry.PPO_MATCHERS:
            raise ConfigError(
                f"{KEY}.terminal_callable={self.terminal_callable!r} cannot be combined with "
                f"{KEY}.terminal={self.terminal!r}: the callable overrides PPO's own matcher only "
                f"({', '.join(registry.PPO_MATCHERS)}); choose either the callable or the named rule"
            )
        if self.terminal not in registry.BUILTINS and self.catalog is None:
            raise registry.unknown_name(self.terminal, registry.builtin_names(), f"{KEY}.terminal")

    def _catalog(self) -> dict[str, AnyProvider] | None:
        return registry.load_catalog(self.catalog, f"{KEY}.catalog") if self.catalog is not None else None

    def _callable(self) -> AnyProvider:
        assert self.terminal_callable is not None
        key = f"{KEY}.terminal_callable"
        fn = registry.load_callable(self.terminal_callable, key)
        return registry.check_provider(fn, f"{key}={self.terminal_callable!r}")

    def validate_imports(self) -> None:
        """Import ``terminal_callable`` and ``catalog`` and check what they hold; run by ``validate`` and preflight.

        Reports, with the dotted path: an import that fails, a missing attribute, an unusable signature, a catalog
        entry overriding a built-in, and a ``terminal`` that names neither a built-in nor a catalog entry.
        """
        entries = self._catalog()
        if self.terminal_callable is not None:
            self._callable()
        else:
            registry.resolve(self.terminal, entries, f"{KEY}.terminal")

    def needs(self) -> frozenset[str]:
        """The data columns the selected reward needs (``reference``, ``prompt``); imports user code only when the
        reward is a ``terminal_callable`` or a catalog entry."""
        if self.terminal_callable is not None:
            return self._callable().needs
        builtin = registry.BUILTINS.get(self.terminal)
        if builtin is not None:
            return builtin.needs
        return registry.resolve(self.terminal, self._catalog(), f"{KEY}.terminal").needs

    def build(self) -> RewardFunction:
        """The callable that scores completions on this config's scale (imports user code where configured)."""
        if self.terminal_callable is not None:
            provider = self._callable()
            return RewardFunction(name=self.terminal_callable, provider=provider, needs=provider.needs, rescale=False)
        return function_for(
            self.terminal, self._catalog(), self.correct_reward, self.incorrect_reward, f"{KEY}.terminal"
        )


def check_reward_needs(needs: set[str] | frozenset[str], supplies_reference: bool, where: str) -> None:
    """Refuse, before any worker starts, a reward that needs ``reference`` when the data cannot supply one.

    ``where`` names the selected rule as the user wrote it, e.g. ``"model.reward.terminal='gsm8k'"``.
    """
    if "reference" in needs and not supplies_reference:
        raise ConfigError(
            f"{where} needs a 'reference' (ground-truth) column, but the data supplies none: set "
            f"data.response_column to the column holding the answer, or choose a reward that needs no reference "
            f"(nonempty, constant, none)"
        )
