"""The preference data module of DPO: ``{prompt, chosen, rejected}`` rows from a file, or synthetic toy pairs."""

from __future__ import annotations

import random

from typing_extensions import override

from lightning_rl.data.arithmetic import ArithmeticTask
from lightning_rl.data.projection import make_preference_projector
from lightning_rl.data.reader import Row, read_rows
from lightning_rl.data.sources import ListSource, RowSource
from lightning_rl.data.stream import CursorDataModule
from lightning_rl.errors import ConfigError


def synthetic_pairs(count: int, seed: int) -> list[Row]:
    """``count`` arithmetic prompts, each with the right answer as ``chosen`` and a near miss as ``rejected``."""
    task = ArithmeticTask(num_rows=count)
    pairs = []
    for i in range(count):
        row = task.row(seed, i)
        miss = random.Random(f"synthetic_pairs:{seed}:{i}").choice((-2, -1, 1, 2))
        pairs.append(
            {"prompt": row["prompt"], "chosen": row["reference"], "rejected": str(int(row["reference"]) + miss)}
        )
    return pairs


class PreferenceDataModule(CursorDataModule):
    """Batches of preference rows (``prompt``, ``chosen``, ``rejected``, other columns, ``_index``, ``_epoch``).

    Same order and cursor as the prompt data module; the data seed is ``seed``.
    """

    def __init__(
        self,
        path: str | None = None,
        prompt_column: str = "prompt",
        chosen_column: str = "chosen",
        rejected_column: str = "rejected",
        synthetic_pairs: int = 0,
        shuffle: bool = False,
        seed: int = 0,
        batch_size: int | None = None,
    ) -> None:
        """
        Args:
            path: A local file of preference rows, read like a prompt file (JSON lines, stream, array; gzip allowed).
            prompt_column: The column holding the prompt; renamed to prompt.
            chosen_column: The preferred completion's column; renamed to chosen.
            rejected_column: The dispreferred completion's column; renamed to rejected.
            synthetic_pairs: When > 0 (and no path), this many in-memory arithmetic toy pairs instead of a file.
            shuffle: Permute the rows every epoch with (seed + epoch), then stride them across data ranks.
            seed: The run seed; it orders the rows and draws the synthetic pairs.
            batch_size: Pairs per rank and batch; normally left unset and derived by the method.
        """
        if path == "":
            path = None
        if synthetic_pairs < 0:
            raise ConfigError(f"data.synthetic_pairs must be >= 0, got {synthetic_pairs}")
        if (path is None) == (synthetic_pairs == 0):
            raise ConfigError(
                "set exactly one preference source: data.path (a file of prompt/chosen/rejected rows) or "
                f"data.synthetic_pairs > 0 (got path={path!r}, synthetic_pairs={synthetic_pairs})"
            )
        columns = (prompt_column, chosen_column, rejected_column)
        if len(set(columns)) != 3 or not all(columns):
            raise ConfigError(
                "data.prompt_column, data.chosen_column and data.rejected_column must be three distinct names, got "
                f"{list(columns)}"
            )
        super().__init__(int(seed), shuffle, batch_size)
        self.path = path
        self.prompt_column = prompt_column
        self.chosen_column = chosen_column
        self.rejected_column = rejected_column
        self.synthetic_pairs = synthetic_pairs

    @override
    def _build_source(self) -> RowSource:
        if self.path is None:
            return ListSource(
                synthetic_pairs(self.synthetic_pairs, self.data_seed), f"synthetic_pairs={self.synthetic_pairs}"
            )
        project = make_preference_projector(self.prompt_column, self.chosen_column, self.rejected_column)
        return ListSource(read_rows(self.path, project), self.path)
