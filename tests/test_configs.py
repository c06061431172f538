"""Every shipped YAML parses, instantiates and passes preflight (``validate``), and recipe layers compose."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_rl.cli import RLCLI

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_config_validates(config, capsys):
    RLCLI(args=["validate", "--config", str(config)])
    assert "config OK" in capsys.readouterr().out


def test_there_are_configs():
    assert any(p.name == "ppo_arith_tiny.yaml" for p in CONFIGS)
    assert any(p.name == "sft_arith_tiny.yaml" for p in CONFIGS)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_layers_onto_its_base(recipe, capsys):
    base = recipe.read_text().splitlines()[0].removeprefix("# base: ").strip()
    RLCLI(args=["validate", "--config", str(REPO / base), "--config", str(recipe)])
    assert "config OK" in capsys.readouterr().out
