"""Prompt sources: random-access corpora of projected rows (local file, Hugging Face dataset, factory, arithmetic).

A source is a finite sequence; the data module decides the order (shuffle, epochs, ranks). Rows come out already renamed
(``prompt``, optional ``reference``, every other column kept) and validated. Building a source is the moment a file is
parsed or a dataset loaded: construction fails on a bad file or a bad row 0, before any model is built.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lightning_rl.data.arithmetic import ArithmeticTask
from lightning_rl.data.config import DataConfig, import_callable
from lightning_rl.data.projection import make_row_projector
from lightning_rl.data.reader import Row, RowError, RowTransform, json_kind, read_rows
from lightning_rl.errors import DataError


class RowSource(Protocol):
    """A finite corpus of projected rows."""

    label: str
    """Where the rows come from, for messages."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Row: ...


class ListSource:
    """Rows held in memory (a parsed file, a factory's output, synthetic pairs); validated when built."""

    def __init__(self, rows: list[Row], label: str) -> None:
        if not rows:
            raise DataError(f"{label}: no rows; a prompt source needs at least one row")
        self.rows = rows
        self.label = label

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Row:
        return self.rows[index]


class ArithmeticSource:
    """The built-in task: row ``i`` is ``task.row(seed, i)``, generated on demand."""

    def __init__(self, task: ArithmeticTask, seed: int) -> None:
        self.task = task
        self.seed = seed
        self.label = f"arithmetic(seed={seed}, num_rows={task.num_rows})"

    def __len__(self) -> int:
        return self.task.num_rows

    def __getitem__(self, index: int) -> Row:
        return dict(self.task.row(self.seed, index))


class HFSource:
    """A Hugging Face ``datasets.Dataset``, projected row by row on access (row 0 when the source is built)."""

    def __init__(self, dataset: Any, label: str, items_fn: Callable[[Row], Row] | None, project: RowTransform) -> None:
        self.dataset = dataset
        self.label = label
        self.items_fn = items_fn
        self.project = project
        if len(dataset) == 0:
            raise DataError(f"{label}: the split has no rows")
        self[0]

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Row:
        row = self.dataset[index]
        if self.items_fn is not None:
            try:
                row = self.items_fn(row)
            except Exception as e:  # the user's map failed on this row: name the row, keep the message
                raise DataError(f"{self.label}, row index {index}: data.items_fn raised {type(e).__name__}: {e}") from e
            if not isinstance(row, dict):
                raise DataError(f"{self.label}, row index {index}: data.items_fn returned {json_kind(row)}, not a dict")
        try:
            return self.project(row)
        except RowError as e:
            raise DataError(f"{self.label}, row index {index}: {e}") from None


def load_file_rows(path: str, prompt_column: str = "prompt", response_column: str | None = None) -> list[Row]:
    """Read and project every row of a local file, exactly as a run does (``check-data`` calls this too)."""
    rows = read_rows(path, make_row_projector(prompt_column, response_column))
    if not rows:
        raise DataError(f"{path}: the file holds no rows")
    return rows


def build_prompt_source(data: DataConfig, data_seed: int) -> RowSource:
    """Materialize the configured source; DataError/ConfigError on a bad file, dataset, factory or row 0."""
    if data.path is not None:
        return ListSource(load_file_rows(data.path, data.prompt_column, data.response_column), data.path)
    project = make_row_projector(data.prompt_column, data.response_column)
    if data.factory is not None:
        return _factory_source(data.factory, project)
    if data.name is not None:
        items_fn = import_callable(data.items_fn, "data.items_fn") if data.items_fn is not None else None
        return HFSource(_load_hf_dataset(data), _hf_label(data), items_fn, project)
    return ArithmeticSource(data.arithmetic_task(), data_seed)


def _factory_source(dotted: str, project: RowTransform) -> ListSource:
    label = f"data.factory={dotted!r}"
    factory = import_callable(dotted, "data.factory")
    try:
        made = factory()
    except Exception as e:
        raise DataError(f"{label} raised {type(e).__name__}: {e}") from e
    if isinstance(made, (str, bytes, dict)) or not isinstance(made, Sequence):
        raise DataError(f"{label} returned {type(made).__name__}; it must return a list (or sequence) of row dicts")
    rows = []
    for index in range(len(made)):
        row = made[index]
        if not isinstance(row, dict):
            raise DataError(f"{label}, row index {index}: a row must be a dict, got {json_kind(row)}")
        try:
            rows.append(project(row))
        except RowError as e:
            raise DataError(f"{label}, row index {index}: {e}") from None
    return ListSource(rows, label)


def _hf_label(data: DataConfig) -> str:
    return f"data.name={data.name!r} (subset {data.subset!r}, split {data.split!r})"


def _load_hf_dataset(data: DataConfig) -> Any:
    """Load one split; a directory written by ``Dataset.save_to_disk`` is read with ``load_from_disk``."""
    import datasets  # heavy; imported when a data module is set up, never at preflight

    assert data.name is not None
    label = _hf_label(data)
    try:
        if os.path.isfile(os.path.join(data.name, "state.json")):  # a single saved Dataset: one table, no configs
            if data.subset != "default":
                raise DataError(
                    f"{label}: a dataset saved with save_to_disk has one configuration; set data.subset=default"
                )
            return datasets.load_from_disk(data.name)
        loaded = datasets.load_dataset(data.name, data.subset, split=data.split, data_files=data.data_files)
    except DataError:
        raise
    except Exception as e:  # a user-input boundary: whatever datasets raises, the user gets one line naming the source
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(
            f"{label}: cannot load the dataset ({type(e).__name__}: {detail}). A hub name needs network access; a "
            "local dataset can be given as a directory, or as a builder name (json, parquet, csv) with data.data_files"
        ) from None
    if not isinstance(loaded, datasets.Dataset):
        raise DataError(f"{label}: expected one split, got {type(loaded).__name__}")
    return loaded
