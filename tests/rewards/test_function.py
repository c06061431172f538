"""RewardFunction: the scale mapping, the needs guard, and failures that name the provider and the sample."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

from lightning_rl.errors import ConfigError, RewardError
from lightning_rl.rewards import RewardConfig, RewardFunction, reward_provider, score

pytestmark = pytest.mark.unit


def rows_for(references: Sequence[object]) -> list[dict[str, Any]]:
    return [{"prompt": f"p{i}", "reference": r} for i, r in enumerate(references)]


def test_ppo_default_is_arithmetic_exact_match_on_its_scale() -> None:
    fn = RewardConfig(correct_reward=1.0, incorrect_reward=-1.0).build()
    assert isinstance(fn, RewardFunction)
    assert fn.name == "arithmetic_exact_match" and fn.needs == frozenset({"reference"})
    assert fn(["65", "It is 65", "-31"], rows_for(["65", "65", "-31"])) == [1.0, -1.0, 1.0]


def test_shared_rule_named_for_ppo_keeps_ppos_scale() -> None:
    fn = RewardConfig(terminal="arithmetic", correct_reward=0.5, incorrect_reward=-0.25).build()
    assert fn(["It is 65.", "64"], rows_for(["65", "65"])) == [0.5, -0.25]


@pytest.mark.parametrize(("value", "expected"), [(0.0, -1.0), (1.0, 3.0), (0.25, 0.0), (0.5, 1.0)])
def test_continuous_value_maps_linearly(value: float, expected: float) -> None:
    # incorrect + v * (correct - incorrect) with incorrect=-1, correct=3: v=0.25 -> -1 + 0.25*4 = 0.
    provider = reward_provider()(lambda completions, references, prompts, rows: [value] * len(completions))
    fn = RewardFunction("cont", provider, frozenset(), correct=3.0, incorrect=-1.0)
    assert fn(["a"], [{}]) == [expected]


def test_endpoints_map_exactly() -> None:
    # 0.1 + 1.0 * (0.3 - 0.1) is 0.30000000000000004; the rule's 1 must be exactly correct_reward.
    assert score("constant", ["x"], correct=0.3, incorrect=0.1) == [0.3]


def test_missing_reference_is_refused_naming_the_sample() -> None:
    fn = RewardConfig(terminal="arithmetic").build()
    with pytest.raises(
        RewardError, match=r"'arithmetic' failed on sample 1: it needs 'reference'.*data.response_column"
    ):
        fn(["1", "2"], [{"reference": "1"}, {"prompt": "x"}])


def test_rule_without_needs_ignores_missing_reference() -> None:
    assert RewardConfig(terminal="nonempty").build()(["a", ""], [{}, {"reference": "x"}]) == [1.0, 0.0]


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown reward 'gsm9k'; known: arithmetic, arithmetic_exact_match.*gsm8k"):
        score("gsm9k", ["1"], ["1"])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_fail_naming_provider_and_sample(bad: float) -> None:
    provider = reward_provider()(lambda completions, references, prompts, rows: [0.0, 1.0, bad])
    fn = RewardFunction("my_rm", provider, frozenset())
    with pytest.raises(RewardError, match=r"reward provider 'my_rm' failed on sample 2: returned the non-finite value"):
        fn(["a", "b", "c"], [{}, {}, {}])


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ([1.0], r"returned 1 scores for 2 completions"),
        ("10", r"returned str, not one float per completion"),
        (None, r"returned NoneType"),
        ([1.0, "1.0"], r"failed on sample 1: returned '1.0', not a number"),
        ([1.0, None], r"failed on sample 1: returned None, not a number"),
    ],
)
def test_malformed_results_are_refused(returned: object, message: str) -> None:
    fn = RewardFunction("rm", reward_provider()(lambda *columns: returned), frozenset())  # type: ignore[arg-type]
    with pytest.raises(RewardError, match=message):
        fn(["a", "b"], [{}, {}])


def test_provider_exception_is_located_to_the_failing_sample() -> None:
    def fragile(completions: Sequence[str], references: object, prompts: object, rows: object) -> list[float]:
        return [1.0 / len(c) for c in completions]  # ZeroDivisionError on the empty completion

    fn = RewardFunction("fragile", reward_provider()(fragile), frozenset())
    with pytest.raises(RewardError, match=r"'fragile' failed on sample 2: ZeroDivisionError"):
        fn(["a", "bb", "", "c"], [{}] * 4)


def test_batch_only_failure_is_reported_as_such() -> None:
    def batch_only(completions: Sequence[str], *rest: object) -> list[float]:
        if len(completions) > 1:
            raise RuntimeError("out of memory")
        return [0.0]

    fn = RewardFunction("rm", reward_provider()(batch_only), frozenset())
    with pytest.raises(RewardError, match=r"failed on a batch of 3 samples \(no single sample reproduces it\).*memory"):
        fn(["a", "b", "c"], [{}] * 3)


def test_group_level_provider_gets_group_ids_and_failures_name_the_group() -> None:
    @reward_provider(group_level=True)
    def rank_in_group(completions, references, prompts, rows, group_ids):  # type: ignore[no-untyped-def]
        if "boom" in completions:
            raise ValueError("boom")
        best: dict[int, int] = {}
        for c, g in zip(completions, group_ids, strict=True):
            best[g] = max(best.get(g, 0), len(c))
        return [float(len(c) == best[g]) for c, g in zip(completions, group_ids, strict=True)]

    fn = RewardFunction("rank", rank_in_group, frozenset())
    assert fn(["a", "bbb", "cc", "d"], [{}] * 4, group_ids=[0, 0, 1, 1]) == [0.0, 1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="group-level"):
        fn(["a"], [{}])
    with pytest.raises(RewardError, match=r"'rank' failed on sample 2 \(group of samples \[2, 3\]\): ValueError: boom"):
        fn(["a", "b", "boom", "c"], [{}] * 4, group_ids=[0, 0, 1, 1])


def test_columns_reach_the_provider() -> None:
    seen: dict[str, Any] = {}

    @reward_provider(needs={"prompt", "reference"})
    def spy(completions, references, prompts, rows):  # type: ignore[no-untyped-def]
        seen.update(references=references, prompts=prompts, rows=rows)
        return [0.0] * len(completions)

    fn = RewardFunction("spy", spy, spy.needs)
    fn(["a", "b"], [{"prompt": "1+1=", "reference": 2, "extra": [1]}, {"prompt": "2+2=", "reference": "4"}])
    assert seen["references"] == ["2", "4"]  # text, whatever the data's type
    assert seen["prompts"] == ["1+1=", "2+2="]
    assert seen["rows"][0]["extra"] == [1] and seen["rows"][0]["reference"] == 2  # rows keep the raw values


def test_score_validates_column_lengths() -> None:
    with pytest.raises(ValueError, match="references? must hold one value per completion"):
        score("arithmetic", ["1", "2"], ["1"])
    with pytest.raises(ValueError, match="numbers must hold one value per completion"):
        score("countdown", ["1"], ["1"], numbers=[[1], [2]])
