"""``RewardFunction``: a resolved provider bound to a scale, and the guard that nothing is silently scored 0.

Every call checks what came back: one finite number per completion. A provider that raises or returns NaN/inf fails the
iteration with ``RewardError("reward provider '<name>' failed on sample <i>: ...")``. Built-in rules tag the failing
sample themselves; for a custom provider that raised on the batch, the batch is re-scored one sample (a group-level
provider: one group) at a time to find the first that reproduces the failure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lightning_rl.errors import ConfigError, RewardError
from lightning_rl.rewards import registry
from lightning_rl.rewards.provider import AnyProvider, Row, SampleFailure, is_group_level
from lightning_rl.rewards.rules import reference_text


@dataclass(frozen=True)
class RewardFunction:
    """Scores completions on the configured scale: ``(1 - v) * incorrect + v * correct`` for a provider value ``v``
    (1 -> correct, 0 -> incorrect, a continuous v in [0, 1] linearly in between), or the raw values when ``rescale``
    is False (``terminal_callable`` and PPO's ``none``)."""

    name: str
    provider: AnyProvider
    needs: frozenset[str]
    correct: float = 1.0
    incorrect: float = 0.0
    rescale: bool = True

    def __call__(
        self, completions: Sequence[str], rows: Sequence[Row], group_ids: Sequence[int] | None = None
    ) -> list[float]:
        """One score per completion. ``rows[i]`` carries sample i's ``prompt``, ``reference`` (when the data supplies
        one) and any other columns; ``group_ids[i]`` is the prompt it answers (required by group-level providers)."""
        n = len(completions)
        if len(rows) != n:
            raise ValueError(f"reward '{self.name}': {n} completions but {len(rows)} rows")
        references = self._column(rows, "reference")
        prompts = self._column(rows, "prompt")
        group = is_group_level(self.provider)
        if group and (group_ids is None or len(group_ids) != n):
            raise ValueError(f"reward '{self.name}' is group-level: pass one group id per completion")
        columns: tuple[Any, ...] = (completions, references, prompts, rows) + ((group_ids,) if group else ())
        try:
            raw = self.provider(*columns)
        except SampleFailure as failure:
            raise RewardError(f"reward provider '{self.name}' failed on sample {failure.index}: {failure}") from (
                failure.__cause__
            )
        except Exception as exc:
            raise self._locate(exc, columns) from exc
        values = self._check(raw, n)
        if not self.rescale or (self.correct == 1.0 and self.incorrect == 0.0):
            return values
        correct, incorrect = self.correct, self.incorrect
        # (1 - v) * incorrect + v * correct hits both end points exactly, unlike incorrect + v * (correct - incorrect).
        return [(1.0 - v) * incorrect + v * correct for v in values]

    def _column(self, rows: Sequence[Row], key: str) -> list[Any] | None:
        """``rows[*][key]`` (references as text), or None when a row lacks it; refused when ``key`` is needed."""
        values: list[Any] = []
        for i, row in enumerate(rows):
            value = row.get(key)
            if value is None:
                if key in self.needs:
                    raise RewardError(
                        f"reward provider '{self.name}' failed on sample {i}: it needs '{key}' and the row has none "
                        f"(the data must supply it: set data.{'response' if key == 'reference' else 'prompt'}_column)"
                    )
                return None
            if key == "reference":
                try:
                    value = reference_text(value)
                except ValueError as exc:
                    raise RewardError(f"reward provider '{self.name}' failed on sample {i}: {exc}") from exc
            values.append(value)
        return values

    def _check(self, raw: object, n: int) -> list[float]:
        if isinstance(raw, str | bytes) or not hasattr(raw, "__len__") or not hasattr(raw, "__iter__"):
            raise RewardError(
                f"reward provider '{self.name}' returned {type(raw).__name__}, not one float per completion"
            )
        if len(raw) != n:
            raise RewardError(f"reward provider '{self.name}' returned {len(raw)} scores for {n} completions")
        values: list[float] = []
        for i, value in enumerate(raw):
            try:
                if isinstance(value, str | bytes):
                    raise TypeError
                number = float(value)
            except (TypeError, ValueError):
                raise RewardError(
                    f"reward provider '{self.name}' failed on sample {i}: returned {value!r}, not a number"
                ) from None
            if not math.isfinite(number):
                raise RewardError(
                    f"reward provider '{self.name}' failed on sample {i}: returned the non-finite value {number}"
                )
            values.append(number)
        return values

    def _locate(self, exc: Exception, columns: tuple[Any, ...]) -> RewardError:
        """Re-score one sample (group) at a time to name where the batch failure comes from."""
        completions, references, prompts, rows = columns[:4]
        if is_group_level(self.provider):
            group_ids = columns[4]
            members: dict[int, list[int]] = {}
            for i, g in enumerate(group_ids):
                members.setdefault(g, []).append(i)
            subsets = list(members.values())
        else:
            subsets = [[i] for i in range(len(completions))]
        for subset in subsets:
            part: list[Any] = [[column[i] for i in subset] if column is not None else None for column in columns]
            try:
                self.provider(*part)
            except Exception as sample_exc:
                where = f"sample {subset[0]}" if len(subset) == 1 else f"sample {subset[0]} (group of samples {subset})"
                return RewardError(
                    f"reward provider '{self.name}' failed on {where}: {type(sample_exc).__name__}: {sample_exc}"
                )
        return RewardError(
            f"reward provider '{self.name}' failed on a batch of {len(completions)} samples (no single "
            f"{'group' if is_group_level(self.provider) else 'sample'} reproduces it): {type(exc).__name__}: {exc}"
        )


def check_scale(correct: float, incorrect: float, where: str) -> None:
    for key, value in (("correct_reward", correct), ("incorrect_reward", incorrect)):
        if not math.isfinite(value):
            raise ConfigError(f"{where}.{key}={value}: must be a finite number")


def function_for(
    name: str, catalog: Mapping[str, AnyProvider] | None, correct: float, incorrect: float, where: str
) -> RewardFunction:
    """The RewardFunction for a built-in or catalog name on the given scale."""
    provider = registry.resolve(name, catalog, where)
    return RewardFunction(
        name=name,
        provider=provider,
        needs=provider.needs,
        correct=correct,
        incorrect=incorrect,
        rescale=name not in registry.UNSCALED,
    )


def score(
    name: str,
    completions: Sequence[str],
    references: Sequence[object] | None = None,
    prompts: Sequence[Any] | None = None,
    *,
    correct: float = 1.0,
    incorrect: float = 0.0,
    group_ids: Sequence[int] | None = None,
    catalog: str | None = None,
    **columns: Sequence[Any],
) -> list[float]:
    """Score ``completions`` with the reward called ``name`` (a PPO matcher, a shared rule, or a ``catalog`` entry).

    Options: ``correct`` / ``incorrect`` set the scale a rule's 1 / 0 maps to; ``group_ids`` feeds group-level
    providers; ``catalog`` is a ``package.module:factory`` path adding custom providers; every other keyword is a
    per-sample column (one value per completion) that the rule reads from its row, e.g. countdown's
    ``numbers=[[3, 5, 2], ...]`` (countdown's target is the reference). Unknown names raise ConfigError listing the
    known ones; a provider failure raises RewardError naming it and the sample.

    >>> score("arithmetic", ["It is 65.", "64"], references=["65", "65"])
    [1.0, 0.0]
    """
    check_scale(correct, incorrect, "score")
    entries = registry.load_catalog(catalog, "score(catalog=...)") if catalog is not None else None
    function = function_for(name, entries, correct, incorrect, "score")
    n = len(completions)
    named = {"reference": references, "prompt": prompts, **columns}
    given = {key: values for key, values in named.items() if values is not None}
    for key, values in given.items():
        if isinstance(values, str) or len(values) != n:
            raise ValueError(f"score: {key} must hold one value per completion ({n})")
    rows = [{key: values[i] for key, values in given.items()} for i in range(n)]
    return function(completions, rows, group_ids)
