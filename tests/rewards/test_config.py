"""RewardConfig: cross-knob refusals, validate-time import checks, the custom catalog, and the data-side needs check."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable

import pytest

from lightning_rl.errors import ConfigError, RewardError, UserError
from lightning_rl.rewards import (
    PPO_MATCHERS,
    SHARED_RULES,
    RewardConfig,
    check_reward_needs,
    load_callable,
    score,
)

pytestmark = pytest.mark.unit

Module = Callable[[str], str]

GOOD_CALLABLE = """
def judge(completions, references, prompts, rows):
    return [float(len(c)) for c in completions]
judge.needs = frozenset({"prompt"})
"""


def test_defaults_are_ppos_matcher_on_a_one_zero_scale() -> None:
    config = RewardConfig()
    assert (config.terminal, config.correct_reward, config.incorrect_reward, config.process) == (
        "arithmetic_exact_match",
        1.0,
        0.0,
        "none",
    )
    assert config.needs() == frozenset({"reference"})


def test_every_field_has_an_attribute_docstring_for_help() -> None:
    import ast
    import inspect

    from lightning_rl.rewards import config as module

    body = ast.parse(inspect.getsource(module.RewardConfig)).body[0].body  # type: ignore[attr-defined]
    documented = {
        stmt.target.id
        for stmt, following in zip(body, body[1:], strict=False)
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and isinstance(following, ast.Expr)
        and isinstance(following.value, ast.Constant)
    }
    assert documented == {field.name for field in dataclasses.fields(RewardConfig)}


@pytest.mark.parametrize("rule", sorted(SHARED_RULES))
def test_terminal_callable_with_a_shared_rule_is_refused_naming_both_keys(rule: str) -> None:
    with pytest.raises(ConfigError, match=r"model\.reward\.terminal_callable=.*model\.reward\.terminal='" + rule):
        RewardConfig(terminal=rule, terminal_callable="pkg.mod:fn")


@pytest.mark.parametrize("matcher", sorted(PPO_MATCHERS))
def test_terminal_callable_overrides_ppos_own_matchers(matcher: str, user_module: Module) -> None:
    module = user_module(GOOD_CALLABLE)
    fn = RewardConfig(terminal=matcher, terminal_callable=f"{module}:judge", correct_reward=5.0).build()
    # the callable's floats come back unchanged: no correct/incorrect mapping
    assert fn(["ab", ""], [{"prompt": "p"}, {"prompt": "q"}]) == [2.0, 0.0]
    assert fn.name == f"{module}:judge" and fn.needs == frozenset({"prompt"})


def test_post_init_is_cheap_and_imports_no_user_code() -> None:
    config = RewardConfig(terminal_callable="surely_not_a_module_xyz:fn", catalog="also_not_a_module_xyz:factory")
    assert "surely_not_a_module_xyz" not in sys.modules
    with pytest.raises(RewardError, match=r"model\.reward\.catalog='also_not_a_module_xyz:factory': cannot import"):
        config.validate_imports()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"terminal": "gsm9k"}, r"model\.reward\.terminal: unknown reward 'gsm9k'; known: arithmetic, "),
        ({"correct_reward": float("nan")}, r"model\.reward\.correct_reward=nan: must be a finite number"),
        ({"incorrect_reward": float("-inf")}, r"model\.reward\.incorrect_reward=-inf"),
        ({"process": "quadratic"}, r"model\.reward\.process='quadratic': expected one of linear, none"),
        ({"terminal_callable": "pkg.mod.fn"}, r"terminal_callable='pkg\.mod\.fn': expected 'package\.module:callable'"),
        ({"catalog": "pkg:"}, r"model\.reward\.catalog='pkg:'"),
    ],
)
def test_bad_values_are_refused_at_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RewardConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("source", "attr", "message"),
    [
        (None, "fn", r"cannot import 'no_such_pkg_xyz\.mod': ModuleNotFoundError"),
        ("raise RuntimeError('broken at import')", "fn", r"cannot import .*RuntimeError: broken at import"),
        ("def other(c, r, p, rows): return []", "judge", r"has no attribute 'judge'"),
        ("judge = 3", "judge", r"'judge' is a int, not a callable"),
        ("def judge(completions): return []", "judge", r"unusable signature \(completions\).*fn\(completions, refer"),
        ("def judge(c, r, p, rows, *, scale): return []", "judge", r"unusable signature.*missing a required argument"),
        (
            "from lightning_rl.rewards import reward_provider\n"
            "@reward_provider(needs={'reference'})\ndef judge(completions, references): return []",
            "judge",
            r"unusable signature \(completions, references\)",
        ),
        ("def judge(c, r, p, rows): return []\njudge.needs = 'reference'", "judge", r"needs must be a set"),
        ("def judge(c, r, p, rows): return []\njudge.needs = {'answer'}", "judge", r"unknown needs \['answer'\]"),
    ],
)
def test_terminal_callable_problems_are_reported_at_validate_with_the_path(
    source: str | None, attr: str, message: str, user_module: Module
) -> None:
    module = "no_such_pkg_xyz.mod" if source is None else user_module(source)
    config = RewardConfig(terminal_callable=f"{module}:{attr}")
    with pytest.raises(RewardError, match=rf"model\.reward\.terminal_callable='{module}:{attr}'.*{message}"):
        config.validate_imports()
    with pytest.raises(RewardError):
        config.build()


def test_callable_errors_are_user_errors() -> None:
    # the CLI prints a UserError's message alone and exits 2
    assert issubclass(RewardError, UserError) and issubclass(ConfigError, UserError)


def test_load_callable_follows_dotted_attributes(user_module: Module) -> None:
    module = user_module("class Rewards:\n    @staticmethod\n    def judge(c, r, p, rows):\n        return []\n")
    assert callable(load_callable(f"{module}:Rewards.judge", "key"))


CATALOG = """
from lightning_rl.rewards import reward_provider

@reward_provider(needs={"reference"})
def shouting(completions, references, prompts, rows):
    return [float(c.isupper() and c.lower() == r) for c, r in zip(completions, references)]

@reward_provider(group_level=True)
def longest_in_group(completions, references, prompts, rows, group_ids):
    longest = {}
    for c, g in zip(completions, group_ids):
        longest[g] = max(longest.get(g, 0), len(c))
    return [float(len(c) == longest[g]) for c, g in zip(completions, group_ids)]

def make():
    return {"shouting": shouting, "longest_in_group": longest_in_group}

def overriding():
    return {"gsm8k": shouting, "none": shouting, "mine": shouting}

def needs_args(x):
    return {}

def not_a_mapping():
    return [shouting]
"""


def test_catalog_adds_pointwise_and_group_level_providers(user_module: Module) -> None:
    module = user_module(CATALOG)
    shouting = RewardConfig(terminal="shouting", catalog=f"{module}:make", correct_reward=2.0, incorrect_reward=-2.0)
    shouting.validate_imports()
    assert shouting.needs() == frozenset({"reference"})
    assert shouting.build()(["YES", "yes"], [{"reference": "yes"}] * 2) == [2.0, -2.0]

    grouped = RewardConfig(terminal="longest_in_group", catalog=f"{module}:make").build()
    assert grouped(["a", "bb", "ccc", "d"], [{}] * 4, group_ids=[0, 0, 1, 1]) == [0.0, 1.0, 1.0, 0.0]

    # built-ins stay selectable next to a catalog
    assert RewardConfig(terminal="arithmetic", catalog=f"{module}:make").build()(["65"], [{"reference": "65"}]) == [1.0]


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("overriding", r"catalog entries may not override built-in rewards: gsm8k, none"),
        ("needs_args", r"the catalog factory must take no arguments"),
        ("not_a_mapping", r"the catalog factory must return a mapping name -> provider, got list"),
    ],
)
def test_bad_catalogs_are_refused_at_validate(factory: str, message: str, user_module: Module) -> None:
    module = user_module(CATALOG)
    with pytest.raises(UserError, match=rf"model\.reward\.catalog='{module}:{factory}': {message}"):
        RewardConfig(terminal="arithmetic", catalog=f"{module}:{factory}").validate_imports()


def test_terminal_missing_from_the_catalog_lists_built_ins_and_entries(user_module: Module) -> None:
    module = user_module(CATALOG)
    config = RewardConfig(terminal="whisper", catalog=f"{module}:make")  # cheap: unresolved until validate
    with pytest.raises(ConfigError, match=r"unknown reward 'whisper'; known: .*gsm8k, .*longest_in_group, shouting"):
        config.validate_imports()


def test_terminal_callable_with_a_catalog_entry_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"terminal_callable.*cannot be combined with model\.reward\.terminal='shouting'"
    ):
        RewardConfig(terminal="shouting", terminal_callable="pkg.mod:fn", catalog="pkg.mod:make")


@pytest.mark.parametrize(
    ("terminal", "needs"),
    [
        ("arithmetic_exact_match", {"reference"}),
        ("none", set()),
        ("arithmetic", {"reference"}),
        ("gsm8k", {"reference"}),
        ("countdown", {"reference"}),
        ("exact_match", {"reference"}),
        ("nonempty", set()),
        ("constant", set()),
    ],
)
def test_declared_needs(terminal: str, needs: set[str]) -> None:
    assert RewardConfig(terminal=terminal).needs() == frozenset(needs)


def test_check_reward_needs_refuses_data_without_a_reference() -> None:
    with pytest.raises(ConfigError, match=r"terminal='gsm8k' needs a 'reference'.*data\.response_column"):
        check_reward_needs(set(RewardConfig(terminal="gsm8k").needs()), False, "model.reward.terminal='gsm8k'")
    check_reward_needs({"reference"}, True, "model.reward.terminal='gsm8k'")
    check_reward_needs(set(), False, "model.reward.terminal='nonempty'")


def test_score_accepts_a_catalog(user_module: Module) -> None:
    module = user_module(CATALOG)
    assert score("shouting", ["YES", "no"], ["yes", "no"], catalog=f"{module}:make") == [1.0, 0.0]
    with pytest.raises(ConfigError, match=r"unknown reward 'whisper'; known: .*shouting"):
        score("whisper", ["x"], catalog=f"{module}:make")


def test_importing_the_package_is_light() -> None:
    code = (
        "import sys, lightning_rl.rewards as r; r.score('gsm8k', ['#### 1'], ['1']); "
        "print(sorted(m for m in ('torch', 'sympy', 'math_verify', 'lightning', 'vllm', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
