"""Row order (shuffle, epochs, rank striding) and the resumable cursor, iterated by hand and under Trainer.fit."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer

from lightning_rl.data import DataConfig, PreferenceDataModule, PromptDataModule
from lightning_rl.errors import ConfigError, DataError

Seen = list[list[tuple[int, int]]]  # per batch: (epoch, corpus index) of each row


def prompt_module(
    rank: int = 0, world_size: int = 1, *, num_rows: int = 10, batch_size: int = 3, shuffle: bool = True, seed: int = 5
) -> PromptDataModule:
    module = PromptDataModule(DataConfig(shuffle=shuffle, num_rows=num_rows), seed=seed, batch_size=batch_size)
    module.set_data_parallel(rank, world_size)
    module.setup("fit")
    return module


def take(module: Any, batches: int) -> Seen:
    iterator = iter(module.train_dataloader())
    return [[(row["_epoch"], row["_index"]) for row in next(iterator)] for _ in range(batches)]


@pytest.mark.unit
def test_rows_carry_prompt_reference_and_position() -> None:
    module = prompt_module(shuffle=False, batch_size=2)
    batch = next(iter(module.train_dataloader()))
    rows = DataConfig(num_rows=10).arithmetic_task().rows(5, 2)
    assert batch == [{**rows[0], "_index": 0, "_epoch": 0}, {**rows[1], "_index": 1, "_epoch": 0}]


@pytest.mark.unit
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_shuffle_permutes_the_corpus_per_epoch_then_strides_it_across_ranks(world_size: int) -> None:
    num_rows, batch_size, seed = 10, 2, 5
    batches = 3 * num_rows // (batch_size * world_size) + 1  # a little over three epochs
    per_rank = [
        take(prompt_module(r, world_size, num_rows=num_rows, batch_size=batch_size, seed=seed), batches)
        for r in range(world_size)
    ]
    # rebuild the global stream: global batch j, row i of rank r sits at position j*B*W + r + i*W
    stream: dict[int, tuple[int, int]] = {}
    for r, seen in enumerate(per_rank):
        for j, batch in enumerate(seen):
            for i, row in enumerate(batch):
                stream[j * batch_size * world_size + r + i * world_size] = row
    assert sorted(stream) == list(range(len(stream)))
    for epoch in range(3):
        expected = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        got = [stream[epoch * num_rows + p] for p in range(num_rows)]
        assert got == [(epoch, index) for index in expected]  # every row exactly once per epoch, in the seeded order
    assert [stream[p][1] for p in range(num_rows)] != [stream[num_rows + p][1] for p in range(num_rows)]


@pytest.mark.unit
def test_without_shuffle_the_order_is_the_file_order_every_epoch() -> None:
    seen = take(prompt_module(shuffle=False, num_rows=4, batch_size=3), 4)
    assert [row for batch in seen for row in batch] == [(e, i) for e in range(3) for i in range(4)]


@pytest.mark.unit
@pytest.mark.parametrize(("world_size", "stop_after"), [(1, 1), (1, 4), (1, 7), (2, 1), (2, 2), (2, 4)])
def test_resume_from_the_cursor_matches_an_uninterrupted_run_over_three_epochs(
    world_size: int, stop_after: int
) -> None:
    num_rows, batch_size = 10, 3
    total = -(-3 * num_rows // (batch_size * world_size))  # batches to cover three epochs
    for rank in range(world_size):
        uninterrupted = take(prompt_module(rank, world_size), total)
        first = prompt_module(rank, world_size)
        head = take(first, stop_after)
        state = first.state_dict()
        assert state["consumed_rows"] == stop_after * batch_size * world_size
        assert (state["epoch"], state["position"]) == divmod(state["consumed_rows"], num_rows)
        resumed = PromptDataModule(DataConfig(shuffle=True, num_rows=num_rows), seed=5, batch_size=batch_size)
        resumed.set_data_parallel(rank, world_size)
        resumed.load_state_dict(state)
        resumed.setup("fit")
        assert head + take(resumed, total - stop_after) == uninterrupted
    assert {row[0] for batch in uninterrupted for row in batch} == {0, 1, 2}


@pytest.mark.unit
def test_resume_with_a_different_data_seed_is_refused_naming_both() -> None:
    state = prompt_module(seed=1).state_dict()
    other = PromptDataModule(
        DataConfig(shuffle=True, num_rows=10), seed=0, rollout_seed=2, data_seed_follows_rollout_seed=True
    )
    with pytest.raises(ConfigError) as info:
        other.load_state_dict(state)
    assert str(info.value).startswith(
        "exact resume refused: the checkpoint's data cursor was written with data seed 1, this run resolves data "
        "seed 2 (seed=0, rollout_seed=2, data_seed_follows_rollout_seed=true)"
    )


@pytest.mark.unit
def test_resume_with_a_different_corpus_or_shuffle_is_refused() -> None:
    state = prompt_module(num_rows=10).state_dict()
    module = PromptDataModule(DataConfig(shuffle=True, num_rows=12), seed=5, batch_size=3)
    module.load_state_dict(state)  # the corpus size is known only once the source is built
    with pytest.raises(DataError, match=r"written over 10 rows, arithmetic\(seed=5, num_rows=12\) now has 12"):
        module.setup("fit")
    with pytest.raises(ConfigError, match=r"written with data.shuffle=True, this run has data.shuffle=False"):
        PromptDataModule(DataConfig(num_rows=10), seed=5).load_state_dict(state)
    with pytest.raises(DataError, match=r"missing \['consumed_rows'"):
        PromptDataModule(DataConfig(num_rows=10), seed=5).load_state_dict(
            {"version": 1, "num_rows": 10, "data_seed": 5, "shuffle": False}
        )


@pytest.mark.unit
def test_resume_on_another_rank_count_continues_from_the_same_global_row_with_a_warning() -> None:
    first = prompt_module(0, 2, shuffle=False)
    take(first, 2)
    single = PromptDataModule(DataConfig(num_rows=10), seed=5, batch_size=3)
    single.load_state_dict(first.state_dict())
    with pytest.warns(UserWarning, match="resuming the data cursor on 1 data ranks; it was saved on 2"):
        single.setup("fit")
    assert take(single, 1) == [[(1, 2), (1, 3), (1, 4)]]  # 2 batches x 3 rows x 2 ranks = 12 rows consumed


@pytest.mark.unit
def test_batch_size_is_required_and_set_once() -> None:
    module = PromptDataModule(DataConfig(num_rows=4))
    module.setup("fit")
    with pytest.raises(ConfigError, match="has no batch size: the method sets it with set_batch_size"):
        module.train_dataloader()
    module.set_batch_size(2)
    module.set_batch_size(2)
    with pytest.raises(ConfigError, match="was given batch_size=2 but the method needs 4 prompts per rank"):
        module.set_batch_size(4)
    with pytest.raises(ConfigError, match="must be a positive integer, got 0"):
        PromptDataModule(DataConfig(), batch_size=0)


@pytest.mark.unit
def test_preference_module_rows_and_cursor(tmp_path: Any) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(f'{{"q": "p{i}", "good": "g{i}", "bad": "b{i}"}}\n' for i in range(5)))
    module = PreferenceDataModule(
        str(path), prompt_column="q", chosen_column="good", rejected_column="bad", shuffle=True, seed=3, batch_size=2
    )
    module.setup("fit")
    uninterrupted = take(module, 6)
    first = PreferenceDataModule(
        str(path), prompt_column="q", chosen_column="good", rejected_column="bad", shuffle=True, seed=3, batch_size=2
    )
    first.setup("fit")
    batch = next(iter(first.train_dataloader()))
    i = batch[0]["_index"]
    assert batch[0] == {"prompt": f"p{i}", "chosen": f"g{i}", "rejected": f"b{i}", "_index": i, "_epoch": 0}
    resumed = PreferenceDataModule(
        str(path), prompt_column="q", chosen_column="good", rejected_column="bad", shuffle=True, seed=3, batch_size=2
    )
    resumed.load_state_dict(first.state_dict())
    resumed.setup("fit")
    assert uninterrupted[0] == [(row["_epoch"], row["_index"]) for row in batch]
    assert uninterrupted[1:] == take(resumed, 5)


@pytest.mark.unit
def test_preference_synthetic_pairs_and_refusals(tmp_path: Any) -> None:
    module = PreferenceDataModule(synthetic_pairs=6, seed=1, batch_size=3)
    module.setup("fit")
    batch = next(iter(module.train_dataloader()))
    assert len(batch) == 3 and all(r["chosen"] != r["rejected"] and r["prompt"].endswith("=") for r in batch)
    assert batch[0]["chosen"] == str(eval(batch[0]["prompt"][:-1]))  # the arithmetic answer is the preferred one
    with pytest.raises(ConfigError, match="set exactly one preference source"):
        PreferenceDataModule()
    with pytest.raises(ConfigError, match="set exactly one preference source"):
        PreferenceDataModule(path="x.jsonl", synthetic_pairs=2)
    with pytest.raises(ConfigError, match="must be three distinct names"):
        PreferenceDataModule(path="x.jsonl", chosen_column="prompt")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "chosen": "c", "rejected": "r"}\n{"prompt": "p", "chosen": "c"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2:1: row 2: no 'rejected' column"):
        PreferenceDataModule(path=str(bad)).setup("fit")


# -- under Lightning: the fit loop fetches one batch ahead -------------------------------------------------------------


class Recorder(LightningModule):
    """Records the rows each training_step receives and the cursor it sees, and stops after ``stop_after`` steps."""

    def __init__(self, data: PromptDataModule, stop_after: int) -> None:
        super().__init__()
        self.data = data
        self.automatic_optimization = False
        self.stop_after = stop_after
        self.seen: Seen = []
        self.cursor_in_step: list[int] = []

    def training_step(self, batch: list[dict[str, Any]], batch_idx: int) -> None:
        self.seen.append([(row["_epoch"], row["_index"]) for row in batch])
        self.cursor_in_step.append(self.data.state_dict()["consumed_rows"])
        if len(self.seen) >= self.stop_after:
            self.trainer.should_stop = True

    def configure_optimizers(self) -> None:
        return None


def fit(module: PromptDataModule, steps: int) -> Recorder:
    recorder = Recorder(module, steps)
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice about workers, optimizers and infinite datasets
        trainer.fit(recorder, datamodule=module)
    return recorder


def unset_module(rank: int, world_size: int) -> PromptDataModule:
    module = PromptDataModule(DataConfig(shuffle=True, num_rows=10), seed=5, batch_size=3)
    module.set_data_parallel(rank, world_size)
    return module


@pytest.mark.integration
@pytest.mark.parametrize("world_size", [1, 2])
def test_trainer_fit_stop_and_resume_sees_exactly_the_uninterrupted_rows(world_size: int) -> None:
    total, stop_after, rows_per_step = 10 // world_size + 1, 3, 3 * world_size
    for rank in range(world_size):
        uninterrupted = fit(unset_module(rank, world_size), total)
        assert uninterrupted.seen == take(prompt_module(rank, world_size), total)
        # inside step i the cursor counts batch i (committed when the loop received it), never the prefetched one
        assert uninterrupted.cursor_in_step == [rows_per_step * (i + 1) for i in range(total)]

        first_module = unset_module(rank, world_size)
        first = fit(first_module, stop_after)
        state = first_module.state_dict()
        assert state["consumed_rows"] == stop_after * rows_per_step
        resumed_module = unset_module(rank, world_size)
        resumed_module.load_state_dict(state)
        resumed = fit(resumed_module, total - stop_after)
        assert first.seen + resumed.seen == uninterrupted.seen
        assert resumed_module.state_dict()["consumed_rows"] == total * rows_per_step
