"""The countdown rule: safe exact evaluation, each given number at most once, hostile payloads never executed."""

from __future__ import annotations

import ast
import inspect
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lightning_rl.errors import RewardError
from lightning_rl.rewards import countdown, score

pytestmark = pytest.mark.unit


def cd(completion: str, numbers: list[int], target: int) -> float:
    return score("countdown", [completion], [target], numbers=[numbers])[0]


@pytest.mark.parametrize(
    ("completion", "numbers", "target", "expected"),
    [
        ("(3+5)*2", [3, 5, 2], 16, 1.0),
        ("<think>try 3*5</think>\n<answer> (3 + 5) * 2 </answer>", [3, 5, 2], 16, 1.0),
        ("<answer>3*5</answer> then <answer>(3+5)*2</answer>", [3, 5, 2], 16, 1.0),  # the last answer tag
        ("(3+5)*2 = 16", [3, 5, 2], 16, 1.0),  # a claimed result after '=' is ignored
        ("(3+5)*2 = 17", [3, 5, 2], 16, 1.0),  # ... the value is computed, not claimed
        ("Let me think.\nSo: (3 + 5) * 2.", [3, 5, 2], 16, 1.0),  # prose and trailing punctuation on the last line
        ("(3+5)×2", [3, 5, 2], 16, 1.0),
        ("(3+5)*2", [2, 3, 5, 7], 16, 1.0),  # not every number needs to be used
        ("9/3", [9, 3], 3, 1.0),
        ("(1/3)*9", [1, 3, 9], 3, 1.0),  # exact: Fraction(1, 3) * 9 == 3, no float rounding
        ("(10-1/3)*3", [10, 1, 3, 3], 29, 1.0),  # two 3s given, two used
        ("2*2+5", [2, 2, 5], 9, 1.0),
        ("3*5+2", [3, 5, 2], 16, 0.0),  # wrong value
        ("7/2", [7, 2], 3, 0.0),  # 3.5 is not 3: no integer division
        ("3+3+5", [3, 5, 2], 11, 0.0),  # 3 reused
        ("4*4", [3, 5, 2], 16, 0.0),  # 4 not given
        ("03+13", [3, 13], 16, 0.0),  # leading zeros are not the given number
        ("-3+19", [3, 19], 16, 0.0),  # no unary minus
        ("5/(3-3)", [3, 3, 5], 0, 0.0),  # division by zero scores 0
        ("2^4", [2, 4], 16, 0.0),  # no xor / power
        ("2**4", [2, 4], 16, 0.0),
        ("", [3, 5, 2], 16, 0.0),
        ("(3+5)*2)", [3, 5, 2], 16, 0.0),  # unbalanced
        ("((3+5)*2", [3, 5, 2], 16, 0.0),
        ("\u0663+\u0665", [3, 5], 8, 0.0),  # Arabic-Indic digits are not given numbers
        ("3 + 5", [3, 5], 8, 1.0),
    ],
)
def test_countdown(completion: str, numbers: list[int], target: int, expected: float) -> None:
    assert cd(completion, numbers, target) == expected


@pytest.mark.parametrize(
    "payload",
    [
        "__import__('os').system('touch {marker}')",
        "<answer>__import__('os').system('touch {marker}')</answer>",
        "open('{marker}', 'w').write('x')",
        "(lambda: __import__('os').system('touch {marker}'))()",
        "[c for c in ().__class__.__base__.__subclasses__()]; open('{marker}','w')",
    ],
)
def test_code_payloads_are_never_executed(payload: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    assert cd(payload.format(marker=marker), [1, 2, 3], 3) == 0.0
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload",
    [
        "9**9**9",
        "<answer>9**9**9</answer>",
        "9 ** 9 ** 9 ** 9",
        "(9*9)**(9*9)**9",
        "9" * 50_000,  # a huge literal (past Python's int-from-str guard) is simply not a given number
        "(" * 10_000 + "9" + ")" * 10_000,  # deep nesting: refused before it can exhaust the recursion limit
        "9+" * 20_000 + "9",
    ],
)
def test_huge_payloads_are_refused_quickly(payload: str) -> None:
    start = time.perf_counter()
    assert cd(payload, [9, 9, 9], 9) == 0.0
    assert time.perf_counter() - start < 1.0


def test_nesting_within_the_bound_is_fine() -> None:
    depth = countdown.MAX_DEPTH
    assert cd("(" * depth + "9" + ")" * depth, [9], 9) == 1.0


def test_module_never_evaluates_code() -> None:
    tree = ast.parse(inspect.getsource(countdown))
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not called & {"eval", "exec", "compile", "__import__"}


@pytest.mark.parametrize(
    ("numbers", "message"),
    [
        (None, r"failed on sample 0: .*countdown needs the sample's 'numbers' column"),
        ("3,5,2", r"must be a list of non-negative integers"),
        ([3, "x"], r"must be non-negative integers, got 'x'"),
        ([3, -5], r"must be non-negative integers, got -5"),
        ([3, 2.5], r"must be non-negative integers, got 2.5"),
    ],
)
def test_bad_numbers_are_data_errors(numbers: object, message: str) -> None:
    columns = {} if numbers is None else {"numbers": [numbers]}
    with pytest.raises(RewardError, match=message):
        score("countdown", ["3+5"], [8], **columns)  # type: ignore[arg-type]


def test_nums_column_and_string_numbers_are_accepted() -> None:
    assert score("countdown", ["3+5"], ["8"], nums=[["3", "5"]]) == [1.0]


# Equivalence with a trusted evaluator: random expression trees over distinct given numbers, rendered fully
# parenthesised, must evaluate through the parser to exactly what direct Fraction arithmetic on the tree gives.
Tree = int | tuple[str, "Tree", "Tree"]


def _trees(leaves: int) -> st.SearchStrategy[Tree]:
    if leaves == 1:
        return st.just(0)
    return st.integers(1, leaves - 1).flatmap(
        lambda k: st.tuples(st.sampled_from("+-*/"), _trees(k), _trees(leaves - k))  # type: ignore[arg-type]
    )


def _render(tree: Tree, numbers: list[int], next_leaf: list[int]) -> tuple[str, Fraction | None]:
    if isinstance(tree, int):
        leaf = numbers[next_leaf[0]]
        next_leaf[0] += 1
        return str(leaf), Fraction(leaf)
    op, left, right = tree
    left_text, a = _render(left, numbers, next_leaf)
    right_text, b = _render(right, numbers, next_leaf)
    value: Fraction | None
    if a is None or b is None:
        value = None
    elif op == "+":
        value = a + b
    elif op == "-":
        value = a - b
    elif op == "*":
        value = a * b
    else:
        value = None if b == 0 else a / b
    return f"({left_text}{op}{right_text})", value


@given(st.data(), st.lists(st.integers(0, 100), min_size=1, max_size=6))
def test_parser_matches_direct_fraction_arithmetic(data: st.DataObject, numbers: list[int]) -> None:
    tree = data.draw(_trees(len(numbers)))
    text, expected = _render(tree, numbers, [0])
    assert countdown.countdown_value(text, Counter(str(n) for n in numbers)) == expected
    if expected is not None and expected.denominator == 1:
        assert cd(text, numbers, int(expected)) == 1.0
        assert cd(text, numbers, int(expected) + 1) == 0.0
