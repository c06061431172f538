"""DataConfig's cross-field rules, the one data-seed resolver, and the preflight (readability only, warnings)."""

from __future__ import annotations

import bz2
import warnings
from pathlib import Path
from typing import Any

import pytest

from lightning_rl.data import DataConfig, PromptDataModule, preflight_data, resolve_data_seed
from lightning_rl.errors import ConfigError, DataError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": "a.jsonl", "name": "gsm8k"}, "data.path and data.name are both set"),
        ({"path": "a.jsonl", "factory": "m.f"}, "data.path and data.factory are both set"),
        ({"name": "gsm8k", "response_column": "answer"}, "data.subset is required with data.name='gsm8k'"),
        ({"name": "gsm8k", "subset": "main"}, "data.response_column is required with data.name='gsm8k'"),
        ({"path": "a.jsonl", "items_fn": "m.f"}, "data.items_fn is set but it only applies with data.name"),
        ({"path": "a.jsonl", "subset": "main"}, "data.subset is set but it only applies with data.name"),
        ({"path": "a.jsonl", "split": "test"}, "data.split='test' is set but it only applies with data.name"),
        ({"path": "a.jsonl", "prompt_column": ""}, "data.prompt_column must be a non-empty column name"),
        ({"path": "a.jsonl", "response_column": "prompt"}, "data.prompt_column and data.response_column are both"),
        ({"path": "a.jsonl", "num_rows": 5}, "data.num_rows only apply to the built-in arithmetic source"),
        ({"prompt_column": "question"}, "data.prompt_column / data.response_column do not apply to the built-in"),
        ({"ops": "/"}, "data: arithmetic ops must be a non-empty subset of '+-*', got '/'"),
        ({"num_rows": 0}, "data: arithmetic num_rows must be >= 1, got 0"),
    ],
)
def test_cross_field_refusals_name_the_keys(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        DataConfig(**kwargs)
    assert str(info.value).startswith(message)


def test_empty_strings_mean_unset_and_the_arithmetic_source_is_the_default() -> None:
    config = DataConfig(path="", name="", subset="", response_column="")
    assert config.is_arithmetic and config.path is None and config.supplies_reference()


def test_supplies_reference() -> None:
    assert not DataConfig(path="a.jsonl").supplies_reference()
    assert DataConfig(path="a.jsonl", response_column="answer").supplies_reference()
    assert DataConfig(name="x", subset="main", response_column="answer").supplies_reference()


def test_resolve_data_seed() -> None:
    assert resolve_data_seed(3, 11, False) == 3
    assert resolve_data_seed(3, 11, True) == 11
    for bad in (None, True, 1.5):
        with pytest.raises(ConfigError, match=r"data_seed_follows_rollout_seed=true .* must then be an integer"):
            resolve_data_seed(3, bad, True)  # type: ignore[arg-type]


def test_data_module_and_preflight_share_the_resolver() -> None:
    assert PromptDataModule(DataConfig(), seed=3, rollout_seed=11, data_seed_follows_rollout_seed=True).data_seed == 11
    assert PromptDataModule(DataConfig(), seed=3, rollout_seed=11).data_seed == 3
    with pytest.raises(ConfigError, match="must then be an integer"):
        PromptDataModule(DataConfig(), seed=3, data_seed_follows_rollout_seed=True)
    with pytest.raises(ConfigError, match="must then be an integer"):
        preflight_data(DataConfig(), 3, None, True)


def test_shared_prompt_order_warning() -> None:
    with pytest.warns(UserWarning, match="all arms share one prompt order"):
        found = preflight_data(DataConfig(shuffle=True), seed=0, rollout_seed=7, follows=False)
    assert len(found) == 1 and "all arms share one prompt order" in found[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed, rollout_seed, follows, shuffle in [
            (1, 7, False, True),
            (0, 7, True, True),
            (0, 0, False, True),
            (0, None, False, True),
            (0, 7, False, False),
        ]:
            assert preflight_data(DataConfig(shuffle=shuffle), seed, rollout_seed, follows) == []


def test_data_module_setup_warns_too() -> None:
    module = PromptDataModule(DataConfig(shuffle=True, num_rows=4), seed=0, rollout_seed=5)
    with pytest.warns(UserWarning, match="all arms share one prompt order"):
        module.setup("fit")


def test_preflight_opens_the_path_but_does_not_parse_it(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("this is not json at all\n")
    assert preflight_data(DataConfig(path=str(path)), 0, None, False) == []


def test_preflight_refuses_unreadable_paths_and_other_compressions(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"data.path='.*absent.jsonl' cannot be read \(No such file or directory\)"):
        preflight_data(DataConfig(path=str(tmp_path / "absent.jsonl")), 0, None, False)
    with pytest.raises(DataError, match="is a directory; it must be a file of rows"):
        preflight_data(DataConfig(path=str(tmp_path)), 0, None, False)
    path = tmp_path / "rows.jsonl"
    path.write_bytes(bz2.compress(b'{"prompt": "a"}\n'))
    with pytest.raises(DataError, match="the file is bz2-compressed; only gzip is read"):
        preflight_data(DataConfig(path=str(path)), 0, None, False)


def test_preflight_resolves_callables_without_calling_them() -> None:
    config = DataConfig(name="x", subset="main", response_column="a", items_fn="json.dumps")
    assert preflight_data(config, 0, None, False) == []
    with pytest.raises(ConfigError, match=r"data.factory='json.no_such_thing': module 'json' has no attribute"):
        preflight_data(DataConfig(factory="json.no_such_thing"), 0, None, False)
    with pytest.raises(ConfigError, match=r"data.factory='no_such_module.f': cannot import it"):
        preflight_data(DataConfig(factory="no_such_module.f"), 0, None, False)
    with pytest.raises(ConfigError, match=r"data.items_fn='string.ascii_letters' is not callable"):
        preflight_data(
            DataConfig(name="x", subset="m", response_column="a", items_fn="string.ascii_letters"), 0, None, False
        )
    assert preflight_data(DataConfig(factory="json.decoder:JSONDecoder.decode"), 0, None, False) == []


def test_data_module_construction_parses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("not json\n")
    module = PromptDataModule(DataConfig(path=str(path)))
    with pytest.raises(DataError, match=r"rows.jsonl:1:1: row 1: expected a JSON object"):
        module.setup("fit")
