"""Sources: local file, Hugging Face datasets (local directory, builder + data_files), items_fn, factory, arithmetic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lightning_rl.data import DataConfig
from lightning_rl.data.arithmetic import ArithmeticTask
from lightning_rl.data.sources import build_prompt_source
from lightning_rl.errors import ConfigError, DataError

pytestmark = pytest.mark.unit

ROWS = [{"question": "1+1=", "answer": "2", "id": 0}, {"question": "2+3=", "answer": "5", "id": 1}]


def all_rows(config: DataConfig, seed: int = 0) -> list[dict[str, Any]]:
    source = build_prompt_source(config, seed)
    return [source[i] for i in range(len(source))]


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path for the factory / items_fn modules a test writes."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def write_module(directory: Path, name: str, source: str) -> None:
    (directory / f"{name}.py").write_text(source)


def test_local_file_source(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    config = DataConfig(path=str(path), prompt_column="question", response_column="answer")
    assert all_rows(config) == [
        {"prompt": "1+1=", "reference": "2", "id": 0},
        {"prompt": "2+3=", "reference": "5", "id": 1},
    ]


def test_arithmetic_source_is_the_task_rows_for_the_data_seed() -> None:
    task = ArithmeticTask(max_operand=9, ops="+", num_rows=5)
    assert all_rows(DataConfig(max_operand=9, ops="+", num_rows=5), seed=4) == task.rows(4)


def test_hf_dataset_saved_to_disk(tmp_path: Path) -> None:
    import datasets

    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "ds"))
    config = DataConfig(name=str(tmp_path / "ds"), subset="default", prompt_column="question", response_column="answer")
    assert all_rows(config)[1] == {"prompt": "2+3=", "reference": "5", "id": 1}
    with pytest.raises(
        DataError, match="a dataset saved with save_to_disk has one configuration; set data.subset=default"
    ):
        build_prompt_source(
            DataConfig(name=str(tmp_path / "ds"), subset="main", prompt_column="question", response_column="answer"), 0
        )


def test_hf_dataset_dict_saved_to_disk_selects_the_split(tmp_path: Path) -> None:
    import datasets

    splits = {"train": datasets.Dataset.from_list(ROWS), "test": datasets.Dataset.from_list(ROWS[:1])}
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "dd"))
    config = DataConfig(
        name=str(tmp_path / "dd"), subset="default", split="test", prompt_column="question", response_column="answer"
    )
    assert len(build_prompt_source(config, 0)) == 1
    bad_split = DataConfig(
        name=str(tmp_path / "dd"),
        subset="default",
        split="validation",
        prompt_column="question",
        response_column="answer",
    )
    with pytest.raises(DataError, match=r"split 'validation'\): cannot load the dataset \(ValueError: Unknown split"):
        build_prompt_source(bad_split, 0)


def test_hf_builder_with_data_files(tmp_path: Path) -> None:
    import datasets

    datasets.Dataset.from_list(ROWS).to_parquet(str(tmp_path / "rows.parquet"))
    config = DataConfig(
        name="parquet",
        subset="default",
        data_files=[str(tmp_path / "rows.parquet")],
        prompt_column="question",
        response_column="answer",
    )
    assert [r["prompt"] for r in all_rows(config)] == ["1+1=", "2+3="]


def test_hf_rows_with_null_filled_parts_are_refused_at_row_zero(tmp_path: Path) -> None:
    import datasets

    # Dataset.from_list infers one struct over every content part and fills the keys a part lacks with null
    prompt = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image", "image": "x.png"}]}]
    datasets.Dataset.from_list([{"prompt": prompt, "answer": "a"}]).save_to_disk(str(tmp_path / "ds"))
    config = DataConfig(name=str(tmp_path / "ds"), subset="default", response_column="answer")
    with pytest.raises(DataError) as info:
        build_prompt_source(config, 0)
    assert str(info.value) == (
        f"data.name='{tmp_path / 'ds'}' (subset 'default', split 'train'), row index 0: prompt[0].content[0].image is "
        "null on a 'text' part (the null-fill signature of a columnar export; drop null keys from content parts)"
    )
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": prompt, "answer": "a"}) + "\n")
    # the same row read as a local file is fine: the reader never null-fills
    assert build_prompt_source(DataConfig(path=str(path), response_column="answer"), 0)[0]["prompt"] == prompt


def test_items_fn_runs_before_the_column_rename(tmp_path: Path, module_dir: Path) -> None:
    import datasets

    write_module(
        module_dir, "items_mod", "def items(row):\n    return {'q': row['question'] + ' ?', 'a': row['answer']}\n"
    )
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "ds"))
    config = DataConfig(
        name=str(tmp_path / "ds"), subset="default", items_fn="items_mod.items", prompt_column="q", response_column="a"
    )
    assert all_rows(config)[0] == {"prompt": "1+1= ?", "reference": "2"}


def test_items_fn_failures_name_the_row(tmp_path: Path, module_dir: Path) -> None:
    import datasets

    write_module(
        module_dir, "items_bad", "def items(row):\n    return None\n\ndef boom(row):\n    raise KeyError('x')\n"
    )
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "ds"))
    base: dict[str, Any] = {
        "name": str(tmp_path / "ds"),
        "subset": "default",
        "prompt_column": "question",
        "response_column": "answer",
    }
    with pytest.raises(DataError, match=r"row index 0: data.items_fn returned null, not a dict"):
        build_prompt_source(DataConfig(items_fn="items_bad.items", **base), 0)
    with pytest.raises(DataError, match=r"row index 0: data.items_fn raised KeyError: 'x'"):
        build_prompt_source(DataConfig(items_fn="items_bad.boom", **base), 0)


def test_factory_source(module_dir: Path) -> None:
    write_module(module_dir, "factory_mod", f"ROWS = {ROWS!r}\n\ndef make():\n    return tuple(ROWS)\n")
    config = DataConfig(factory="factory_mod.make", prompt_column="question", response_column="answer")
    assert all_rows(config)[1] == {"prompt": "2+3=", "reference": "5", "id": 1}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("return {'prompt': 'x'}", "data.factory='fac_bad.make' returned dict; it must return a list"),
        ("return []", "data.factory='fac_bad.make': no rows; a prompt source needs at least one row"),
        (
            "return [{'prompt': 'x'}, 'y']",
            "data.factory='fac_bad.make', row index 1: a row must be a dict, got a string",
        ),
        ("return [{'prompt': 'x'}, {'prompt': ''}]", "data.factory='fac_bad.make', row index 1: 'prompt' is an empty"),
        ("raise RuntimeError('no data here')", "data.factory='fac_bad.make' raised RuntimeError: no data here"),
    ],
)
def test_factory_refusals(module_dir: Path, body: str, message: str) -> None:
    write_module(module_dir, "fac_bad", f"def make():\n    {body}\n")
    import importlib
    import sys

    sys.modules.pop("fac_bad", None)
    importlib.invalidate_caches()
    with pytest.raises(DataError) as info:
        build_prompt_source(DataConfig(factory="fac_bad.make"), 0)
    assert str(info.value).startswith(message)


def test_factory_that_cannot_be_imported_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"data.factory='nowhere_mod.make': cannot import it"):
        build_prompt_source(DataConfig(factory="nowhere_mod.make"), 0)


def test_hub_name_fails_at_setup_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets
    import huggingface_hub.constants

    # no network here: make the hub client fail at once instead of retrying
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    config = DataConfig(name="openai/gsm8k", subset="main", prompt_column="question", response_column="answer")
    with pytest.raises(DataError) as info:
        build_prompt_source(config, 0)
    message = str(info.value)
    assert message.startswith("data.name='openai/gsm8k' (subset 'main', split 'train'): cannot load the dataset (")
    assert "A hub name needs network access" in message
