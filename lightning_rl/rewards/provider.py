"""What a reward provider is: the two typed call shapes, the ``needs`` vocabulary, and the built-in rule wrapper.

A provider scores a batch of completions. It is handed the batch column by column, never an untyped options bag:

    pointwise:    provider(completions, references, prompts, rows)             -> Sequence[float]  (one per completion)
    group-level:  provider(completions, references, prompts, rows, group_ids)  -> Sequence[float]

``references`` is the data's ``reference`` column as text (``None`` when the data supplies none), ``prompts`` the
``prompt`` column as the data supplies it (a string or a conversation list), and ``rows`` every column of each sample
(rule parameters such as countdown's ``numbers`` ride there). A provider declares ``needs``, the subset of
``{"prompt", "reference"}`` the data must supply, and a group-level one sets ``group_level = True``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

KNOWN_NEEDS: frozenset[str] = frozenset({"prompt", "reference"})
"""The columns a provider may declare in ``needs``; both are the data-side wiring names (see ``data.prompt_column`` and
``data.response_column``)."""

Row = Mapping[str, Any]


@runtime_checkable
class RewardProvider(Protocol):
    """A pointwise provider: each completion is scored on its own."""

    @property
    def needs(self) -> frozenset[str]:
        """The data columns it reads: a subset of ``KNOWN_NEEDS``."""
        ...

    def __call__(
        self,
        completions: Sequence[str],
        references: Sequence[str] | None,
        prompts: Sequence[Any] | None,
        rows: Sequence[Row],
        /,
    ) -> Sequence[float]: ...


@runtime_checkable
class GroupRewardProvider(Protocol):
    """A group-level provider: scores depend on the other completions of the same prompt (``group_ids[i]``)."""

    @property
    def needs(self) -> frozenset[str]: ...

    @property
    def group_level(self) -> Literal[True]: ...

    def __call__(
        self,
        completions: Sequence[str],
        references: Sequence[str] | None,
        prompts: Sequence[Any] | None,
        rows: Sequence[Row],
        group_ids: Sequence[int],
        /,
    ) -> Sequence[float]: ...


AnyProvider = RewardProvider | GroupRewardProvider


def is_group_level(provider: object) -> bool:
    return getattr(provider, "group_level", False) is True


def coerce_needs(needs: object, owner: str) -> frozenset[str]:
    """``needs`` as a frozenset of known names; a bare string (``"reference"``) is refused, not split into letters."""
    if isinstance(needs, str) or not isinstance(needs, Iterable):
        raise TypeError(f"{owner}: needs must be a set of column names such as {{'reference'}}, got {needs!r}")
    names = frozenset(needs)
    unknown = sorted(str(n) for n in names - KNOWN_NEEDS)
    if unknown:
        raise ValueError(f"{owner}: unknown needs {unknown}; a provider may need {sorted(KNOWN_NEEDS)}")
    return names


@dataclass(frozen=True)
class ProviderFunction:
    """A plain function turned into a provider by :func:`reward_provider` (it gains ``needs`` / ``group_level``)."""

    fn: Callable[..., Sequence[float]]
    needs: frozenset[str] = frozenset()
    group_level: bool = False

    def __call__(self, *columns: Any) -> Sequence[float]:
        return self.fn(*columns)


def reward_provider(
    *, needs: Iterable[str] = (), group_level: bool = False
) -> Callable[[Callable[..., Sequence[float]]], ProviderFunction]:
    """Decorator declaring a function's ``needs`` (and whether it is group-level), for catalogs and terminal callables.

    >>> @reward_provider(needs={"reference"})
    ... def shouts(completions, references, prompts, rows):
    ...     return [float(c.isupper()) for c in completions]
    """
    declared = coerce_needs(needs, "reward_provider")

    def wrap(fn: Callable[..., Sequence[float]]) -> ProviderFunction:
        return ProviderFunction(fn=fn, needs=declared, group_level=group_level)

    return wrap


class SampleFailure(Exception):
    """Raised by a built-in rule with the index of the sample it failed on (the caller names the provider)."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.index = index


Judge = Callable[[str, str | None, Row], float]
"""One sample's verdict, ``judge(completion, reference, row) -> score``. It raises on bad data, never on bad model
text (that scores 0)."""


@dataclass(frozen=True)
class Rule:
    """A built-in pointwise rule: a per-sample ``judge`` looped over the batch, failures tagged with their index."""

    name: str
    judge: Judge
    needs: frozenset[str] = field(default_factory=lambda: frozenset({"reference"}))
    group_level: Literal[False] = False

    def __call__(
        self,
        completions: Sequence[str],
        references: Sequence[str] | None,
        prompts: Sequence[Any] | None,
        rows: Sequence[Row],
        /,
    ) -> list[float]:
        judge = self.judge
        refs: Sequence[str | None] = references if references is not None else [None] * len(completions)
        scores: list[float] = []
        append = scores.append
        try:
            for completion, reference, row in zip(completions, refs, rows, strict=True):
                append(judge(completion, reference, row))
        except Exception as exc:
            raise SampleFailure(len(scores), exc) from exc  # the failing sample is the one not appended
        return scores
