"""The row order shared by every data module, and the resumable cursor.

Order. Epoch ``e`` visits the corpus in the order ``randperm(num_rows, seed=data_seed + e)`` (``0..num_rows-1``
without shuffle). The epochs are concatenated into one endless global stream, strided across the data ranks: rank ``r``
of ``W`` takes global positions ``r, r + W, r + 2W, ...`` and a batch is its next ``batch_size`` of them. Every global
position goes to exactly one rank, so no row is skipped or doubled within an epoch, even when ``num_rows`` is not a
multiple of ``W`` (the striding then simply carries on across the epoch boundary).

Cursor. All ranks share one number: ``consumed_rows``, the global position of the next row the TRAINING LOOP will
receive (every global batch takes ``batch_size * W`` consecutive positions, so it is the same on every rank).
Lightning's fit loop fetches one batch ahead of the step it runs, so counting yielded batches would be one early. Each
yielded batch parks its end position in a queue, and the batch is committed in ``on_before_batch_transfer``, which
Lightning calls exactly once per batch it hands to ``training_step`` (prefetched batches have not reached it). A new
iterator restarts from the committed position, so a prefetched-but-unused batch is yielded again rather than lost.
Without a trainer in its training stage (plain iteration, e.g. a custom loop), a batch is committed when it is yielded.
"""

from __future__ import annotations

import warnings
from abc import abstractmethod
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch.utils.data import DataLoader, IterableDataset
from typing_extensions import override

from lightning_rl.data.reader import Row
from lightning_rl.data.sources import RowSource
from lightning_rl.errors import ConfigError, DataError

CURSOR_VERSION = 1
# Lightning prefetches one batch; more uncommitted batches than this means nothing is committing them.
_MAX_UNCOMMITTED = 8


class EpochOrder:
    """The corpus index at each position of each epoch (caches the permutations of the two most recent epochs)."""

    def __init__(self, num_rows: int, shuffle: bool, data_seed: int) -> None:
        self.num_rows = num_rows
        self.shuffle = shuffle
        self.data_seed = data_seed
        self._cache: dict[int, list[int]] = {}

    def permutation(self, epoch: int) -> list[int]:
        order = self._cache.get(epoch)
        if order is None:
            generator = torch.Generator().manual_seed(self.data_seed + epoch)
            order = torch.randperm(self.num_rows, generator=generator).tolist()
            if len(self._cache) >= 2:
                self._cache.pop(min(self._cache))
            self._cache[epoch] = order
        return order

    def index(self, offset: int) -> tuple[int, int]:
        """``(epoch, corpus index)`` of global stream position ``offset``."""
        epoch, position = divmod(offset, self.num_rows)
        return epoch, self.permutation(epoch)[position] if self.shuffle else position


class _RowStream(IterableDataset):  # type: ignore[type-arg]
    """Endless batches for this rank, starting at the module's committed position."""

    def __init__(self, module: CursorDataModule) -> None:
        self.module = module

    def __iter__(self) -> Iterator[list[Row]]:
        return self.module._batches()


def _keep_rows(batch: list[Row]) -> list[Row]:
    return batch


class CursorDataModule(LightningDataModule):
    """A LightningDataModule over a ``RowSource`` with the order and cursor above; subclasses build the source."""

    def __init__(self, data_seed: int, shuffle: bool, batch_size: int | None) -> None:
        super().__init__()
        self.data_seed = data_seed
        self.shuffle = shuffle
        self.batch_size: int | None = None
        if batch_size is not None:
            self.set_batch_size(batch_size)
        self.source: RowSource | None = None
        self._order: EpochOrder | None = None
        self._rank: int | None = None
        self._world_size: int | None = None
        self._consumed = 0
        self._uncommitted: deque[int] = deque()
        self._loaded: dict[str, Any] | None = None

    # -- what subclasses provide -----------------------------------------------------------------------------------
    @abstractmethod
    def _build_source(self) -> RowSource:
        """The materialised rows this module orders and batches (called once, from ``setup``)."""

    def _seed_description(self) -> str:
        return f"seed={self.data_seed}"

    # -- configuration -----------------------------------------------------------------------------------------------
    def set_batch_size(self, prompts_per_rank: int) -> None:
        """Rows per batch on each rank (the method derives it and calls this from its ``setup``)."""
        if isinstance(prompts_per_rank, bool) or not isinstance(prompts_per_rank, int) or prompts_per_rank < 1:
            raise ConfigError(
                f"the data batch size (prompts per rank) must be a positive integer, got {prompts_per_rank!r}"
            )
        if self.batch_size is not None and self.batch_size != prompts_per_rank:
            raise ConfigError(
                f"the data module was given batch_size={self.batch_size} but the method needs {prompts_per_rank} "
                "prompts per rank; drop batch_size from the data module's config (the method sets it)"
            )
        self.batch_size = prompts_per_rank

    def set_data_parallel(self, rank: int, world_size: int) -> None:
        """Override the data-parallel rank and size (by default they come from the trainer's strategy, else 0 of 1)."""
        if not 0 <= rank < world_size:
            raise ConfigError(f"data rank {rank} is outside a data-parallel group of {world_size}")
        self._rank, self._world_size = rank, world_size

    def _data_parallel(self) -> tuple[int, int]:
        if self._rank is not None and self._world_size is not None:
            return self._rank, self._world_size
        trainer = self.trainer
        kwargs = trainer.distributed_sampler_kwargs if trainer is not None else None
        if kwargs:
            return int(kwargs["rank"]), int(kwargs["num_replicas"])
        return 0, 1

    # -- Lightning hooks ---------------------------------------------------------------------------------------------
    @override
    def setup(self, stage: str) -> None:
        if self.source is not None:
            return
        source = self._build_source()
        self.source = source
        self._order = EpochOrder(len(source), self.shuffle, self.data_seed)
        if self._loaded is not None:
            self._check_loaded(self._loaded)

    @override
    def train_dataloader(self) -> DataLoader[list[Row]]:
        if self.source is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before train_dataloader()")
        if self.batch_size is None:
            raise ConfigError(
                f"{type(self).__name__} has no batch size: the method sets it with set_batch_size() in its setup(), "
                "or pass batch_size"
            )
        return DataLoader(_RowStream(self), batch_size=None, collate_fn=_keep_rows, num_workers=0)

    @override
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        trainer = self.trainer
        if trainer is not None and trainer.training:
            if not self._uncommitted:
                raise RuntimeError("a training batch reached on_before_batch_transfer without coming from this module")
            self._consumed = self._uncommitted.popleft()
        # Lightning calls only the datamodule's hook when both define it; keep the method's own hook working.
        model = trainer.lightning_module if trainer is not None else None
        if model is not None and is_overridden("on_before_batch_transfer", model):
            batch = model.on_before_batch_transfer(batch, dataloader_idx)
        return batch

    # -- iteration ---------------------------------------------------------------------------------------------------
    def _batches(self) -> Iterator[list[Row]]:
        assert self.source is not None and self._order is not None and self.batch_size is not None
        source, order, batch_size = self.source, self._order, self.batch_size
        rank, world_size = self._data_parallel()
        trainer = self.trainer
        loop_commits = trainer is not None and trainer.training
        self._uncommitted.clear()
        offset = self._consumed
        while True:
            batch = []
            for i in range(batch_size):
                epoch, index = order.index(offset + rank + i * world_size)
                row = dict(source[index])
                row["_index"] = index
                row["_epoch"] = epoch
                batch.append(row)
            offset += batch_size * world_size
            if loop_commits:
                if len(self._uncommitted) >= _MAX_UNCOMMITTED:
                    raise RuntimeError(
                        f"{type(self).__name__}: {_MAX_UNCOMMITTED} batches were fetched but none reached the training "
                        "loop's on_before_batch_transfer hook, which is what advances the data cursor; a training_step "
                        "that takes a dataloader_iter is not supported"
                    )
                self._uncommitted.append(offset)
            else:
                self._consumed = offset
            yield batch

    # -- cursor ------------------------------------------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        """The cursor: where the training loop's next batch starts, and what the order depended on (JSON-safe)."""
        num_rows = len(self.source) if self.source is not None else None
        if num_rows is None and self._loaded is not None:
            num_rows = self._loaded["num_rows"]
        rank, world_size = self._data_parallel()
        return {
            "version": CURSOR_VERSION,
            "consumed_rows": self._consumed,
            "epoch": None if num_rows is None else self._consumed // num_rows,
            "position": None if num_rows is None else self._consumed % num_rows,
            "num_rows": num_rows,
            "data_seed": self.data_seed,
            "shuffle": self.shuffle,
            "world_size": world_size,
            "batch_size": self.batch_size,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from a cursor; refuses one whose data seed or shuffle differ from this run's (both values named)."""
        missing = {"version", "consumed_rows", "num_rows", "data_seed", "shuffle"} - set(state_dict)
        if missing:
            raise DataError(
                f"the data cursor in the checkpoint is missing {sorted(missing)}; it is not a cursor of "
                f"{type(self).__name__}"
            )
        if state_dict["version"] != CURSOR_VERSION:
            raise DataError(f"data cursor version {state_dict['version']} is not supported (expected {CURSOR_VERSION})")
        if state_dict["data_seed"] != self.data_seed:
            raise ConfigError(
                f"exact resume refused: the checkpoint's data cursor was written with data seed "
                f"{state_dict['data_seed']}, this run resolves data seed {self.data_seed} "
                f"({self._seed_description()}); the prompt order would differ; resume with the saved run's seeds"
            )
        if state_dict["shuffle"] != self.shuffle:
            raise ConfigError(
                f"exact resume refused: the checkpoint's data cursor was written with data.shuffle="
                f"{state_dict['shuffle']}, this run has data.shuffle={self.shuffle}"
            )
        self._loaded = dict(state_dict)
        self._consumed = int(state_dict["consumed_rows"])
        self._uncommitted.clear()
        if self.source is not None:
            self._check_loaded(self._loaded)

    def _check_loaded(self, state: dict[str, Any]) -> None:
        assert self.source is not None
        if state["num_rows"] is not None and state["num_rows"] != len(self.source):
            raise DataError(
                f"exact resume refused: the checkpoint's data cursor was written over {state['num_rows']} rows, "
                f"{self.source.label} now has {len(self.source)}; the data changed since the run was saved"
            )
        saved_world = state.get("world_size")
        _, world_size = self._data_parallel()
        if saved_world is not None and saved_world != world_size:
            warnings.warn(
                f"resuming the data cursor on {world_size} data ranks; it was saved on {saved_world}. The run "
                "continues from the same global row, but the rows each rank sees differ from an uninterrupted run",
                UserWarning,
                stacklevel=2,
            )
