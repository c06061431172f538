"""The prompt data config, the data seed, and the data preflight (what ``validate`` checks without loading anything)."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lightning_rl.data.arithmetic import ArithmeticTask
from lightning_rl.data.reader import refuse_compression
from lightning_rl.errors import ConfigError, DataError

_ARITHMETIC_DEFAULTS = ArithmeticTask()


@dataclass
class DataConfig:
    """Where prompts come from: a local file, a Hugging Face dataset, a dataset factory, or the arithmetic task.

    With neither ``path``, ``name`` nor ``factory`` set, the built-in arithmetic source is used.
    """

    path: str | None = None
    """A local file of rows: JSON lines, a whitespace-separated stream of objects, or one JSON array; gzip allowed."""
    name: str | None = None
    """A Hugging Face dataset: a hub name, a local dataset directory, or a builder (json, parquet) with data_files."""
    subset: str | None = None
    """The dataset's configuration name, required with name (e.g. main; "default" for single-configuration datasets)."""
    split: str = "train"
    """The split of the Hugging Face dataset to read."""
    data_files: str | list[str] | None = None
    """Files for a builder name (e.g. name=parquet, data_files=[a.parquet]); only with name."""
    prompt_column: str = "prompt"
    """The column holding the prompt (a string or a conversation list); renamed to prompt."""
    response_column: str | None = None
    """The ground-truth column, renamed to reference; must be present and non-null in every row. Required with name."""
    items_fn: str | None = None
    """Dotted path of a deterministic row map fn(row) -> row, applied before the column rename; only with name."""
    factory: str | None = None
    """Dotted path of a zero-argument callable returning a sequence of row dicts (instead of path or name)."""
    shuffle: bool = False
    """Permute the whole corpus every epoch with (data seed + epoch), then stride it across data ranks."""
    max_operand: int = _ARITHMETIC_DEFAULTS.max_operand
    """Arithmetic source only: operands are drawn from [0, max_operand]."""
    ops: str = _ARITHMETIC_DEFAULTS.ops
    """Arithmetic source only: the operators to draw from, a subset of '+-*'."""
    num_rows: int = _ARITHMETIC_DEFAULTS.num_rows
    """Arithmetic source only: rows in one epoch (the source wraps after this many)."""
    prose_fraction: float = _ARITHMETIC_DEFAULTS.prose_fraction
    """Arithmetic source only: share of rows whose ``completion`` (the SFT target) is a sentence, not a bare number."""

    def __post_init__(self) -> None:
        for key in ("path", "name", "subset", "data_files", "response_column", "items_fn", "factory"):
            if getattr(self, key) in ("", []):  # YAML's "empty" means unset
                setattr(self, key, None)
        sources = [f"data.{key}" for key in ("path", "name", "factory") if getattr(self, key) is not None]
        if len(sources) > 1:
            raise ConfigError(f"{' and '.join(sources)} are both set; a run reads one prompt source, choose one")
        if self.name is not None:
            if self.subset is None:
                raise ConfigError(
                    f"data.subset is required with data.name={self.name!r}: the dataset's configuration name "
                    '(e.g. "main"; "default" for a dataset with one configuration or a json/parquet/csv builder)'
                )
            if self.response_column is None:
                raise ConfigError(
                    f"data.response_column is required with data.name={self.name!r}: the column holding each row's "
                    "ground truth (it is renamed to reference)"
                )
        else:
            for key in ("subset", "data_files", "items_fn"):
                if getattr(self, key) is not None:
                    raise ConfigError(f"data.{key} is set but it only applies with data.name, which is not set")
            if self.split != "train":
                raise ConfigError(
                    f"data.split={self.split!r} is set but it only applies with data.name, which is not set"
                )
        if not isinstance(self.prompt_column, str) or not self.prompt_column:
            raise ConfigError("data.prompt_column must be a non-empty column name")
        if self.response_column == self.prompt_column:
            raise ConfigError(f"data.prompt_column and data.response_column are both {self.prompt_column!r}")
        if self.is_arithmetic:
            if self.prompt_column != "prompt" or self.response_column is not None:
                raise ConfigError(
                    "data.prompt_column / data.response_column do not apply to the built-in arithmetic source (its "
                    "rows are already named prompt and reference); set data.path, data.name or data.factory"
                )
            self.arithmetic_task()  # validate the knobs now
        else:
            changed = [
                f"data.{key}"
                for key in ("max_operand", "ops", "num_rows", "prose_fraction")
                if getattr(self, key) != getattr(_ARITHMETIC_DEFAULTS, key)
            ]
            if changed:
                raise ConfigError(
                    f"{', '.join(changed)} only apply to the built-in arithmetic source, which is not used when "
                    "data.path, data.name or data.factory is set; remove them"
                )

    @property
    def is_arithmetic(self) -> bool:
        """True when the built-in arithmetic source is used (no path, name or factory)."""
        return self.path is None and self.name is None and self.factory is None

    def supplies_reference(self) -> bool:
        """Whether every row carries a ``reference`` (for rewards that need ground truth)."""
        return self.is_arithmetic or self.response_column is not None

    def arithmetic_task(self) -> ArithmeticTask:
        try:
            return ArithmeticTask(
                max_operand=self.max_operand, ops=self.ops, num_rows=self.num_rows, prose_fraction=self.prose_fraction
            )
        except ValueError as e:
            raise ConfigError(
                f"data: {e} (data.max_operand / data.ops / data.num_rows / data.prose_fraction)"
            ) from None


def resolve_data_seed(seed: int, rollout_seed: int | None, follows: bool) -> int:
    """The seed that orders the prompt source: ``seed``, or the rollout seed under ``data_seed_follows_rollout_seed``.

    The one place the data seed is decided; preflight and the data modules call it, and the cursor records the result.
    """
    if not follows:
        return int(seed)
    if rollout_seed is None or isinstance(rollout_seed, bool) or not isinstance(rollout_seed, int):
        raise ConfigError(
            f"data_seed_follows_rollout_seed=true orders the prompts with the rollout seed, which must then be an "
            f"integer (got {rollout_seed!r}); set the rollout seed or turn the flag off"
        )
    return rollout_seed


SHARED_ORDER_WARNING = (
    "data.shuffle is on with seed=0 and rollout seed {rollout_seed}, and data_seed_follows_rollout_seed is off: the "
    "prompt order comes from seed alone, so all arms share one prompt order and only the sampling differs. Give each "
    "arm its own seed, or set data_seed_follows_rollout_seed=true."
)


def data_seed_warnings(shuffle: bool, seed: int, rollout_seed: int | None, follows: bool) -> list[str]:
    """The warnings the seed combination deserves; each is also emitted with ``warnings.warn`` (UserWarning)."""
    found = []
    if shuffle and seed == 0 and rollout_seed not in (None, 0) and not follows:
        found.append(SHARED_ORDER_WARNING.format(rollout_seed=rollout_seed))
    for text in found:
        warnings.warn(text, UserWarning, stacklevel=1)  # one location, so preflight and setup warn once between them
    return found


def preflight_data(data: DataConfig, seed: int, rollout_seed: int | None, follows: bool) -> list[str]:
    """Every data check that needs no loading: the data seed, a readable ``data.path`` (opened, never parsed) that is
    not compressed with something other than gzip, and importable ``items_fn`` / ``factory``. Returns the warnings.

    Raises ConfigError or DataError.
    """
    resolve_data_seed(seed, rollout_seed, follows)
    if data.path is not None:
        try:
            with open(data.path, "rb") as f:
                head = f.read(8)
        except IsADirectoryError:
            raise DataError(f"data.path={data.path!r} is a directory; it must be a file of rows") from None
        except OSError as e:
            raise DataError(f"data.path={data.path!r} cannot be read ({e.strerror or e})") from None
        refuse_compression(data.path, head)
    for key in ("items_fn", "factory"):
        dotted = getattr(data, key)
        if dotted is not None:
            import_callable(dotted, f"data.{key}")
    return data_seed_warnings(data.shuffle, seed, rollout_seed, follows)


def import_callable(dotted: str, key: str) -> Callable[..., Any]:
    """Resolve ``package.module.attr`` (or ``package.module:attr``) to a callable; ConfigError naming ``key`` if not."""
    if ":" in dotted:
        module_name, _, attr = dotted.partition(":")
        candidates = [(module_name, attr)]
    else:  # the longest importable prefix is the module, the rest an attribute path
        parts = dotted.split(".")
        candidates = [(".".join(parts[:i]), ".".join(parts[i:])) for i in range(len(parts) - 1, 0, -1)]
    if not candidates or not all(candidates[0]):
        raise ConfigError(f"{key}={dotted!r} must be a dotted path like package.module.function")
    error: Exception | None = None
    for module_name, attr in candidates:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            error = e
            if e.name is not None and not module_name.startswith(e.name):
                break  # the module exists but imports something missing: report that, do not try a shorter prefix
            continue
        except Exception as e:  # the user's module raised while importing
            raise ConfigError(f"{key}={dotted!r}: importing {module_name!r} failed ({type(e).__name__}: {e})") from None
        target: Any = module
        for part in attr.split("."):
            if not hasattr(target, part):
                raise ConfigError(f"{key}={dotted!r}: module {module_name!r} has no attribute {attr!r}")
            target = getattr(target, part)
        if not callable(target):
            raise ConfigError(f"{key}={dotted!r} is not callable")
        return target
    raise ConfigError(f"{key}={dotted!r}: cannot import it ({error})")
