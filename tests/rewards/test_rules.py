"""PPO's arithmetic_exact_match and the shared arithmetic, exact_match, nonempty and constant rules, adversarially."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lightning_rl.data.arithmetic import ArithmeticTask
from lightning_rl.rewards import score

pytestmark = pytest.mark.unit


def one(name: str, completion: str, reference: object = None, **options: object) -> float:
    references = None if reference is None else [reference]
    return score(name, [completion], references, **options)[0]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        ("65", "65", 1.0),
        ("  65\n", "65", 1.0),  # surrounding whitespace allowed
        ("-31", "-31", 1.0),  # negative results occur in the arithmetic task
        ("\u221231", "-31", 1.0),  # U+2212 minus sign
        ("+65", "65", 1.0),
        ("065", "65", 1.0),  # leading zeros: still nothing but an integer with that value
        ("-0", "0", 1.0),
        ("0", "-0", 1.0),
        ("65.", "65", 0.0),  # trailing punctuation is not "nothing but an integer"
        ("65!", "65", 0.0),
        ("The answer is 65", "65", 0.0),  # correct answer as prose scores the incorrect value
        ("65 66", "65", 0.0),  # several numbers
        ("6 5", "65", 0.0),
        ("1,065", "1065", 0.0),
        ("65.0", "65", 0.0),
        ("1e3", "1000", 0.0),
        ("\u0666\u0665", "65", 0.0),  # Arabic-Indic digits are not ASCII integers
        ("\uff16\uff15", "65", 0.0),  # full-width digits
        ("", "65", 0.0),
        ("   ", "0", 0.0),
        ("- 31", "-31", 0.0),
        ("64", "65", 0.0),
    ],
)
def test_arithmetic_exact_match(completion: str, reference: str, expected: float) -> None:
    assert one("arithmetic_exact_match", completion, reference) == expected


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        ("65", "65", 1.0),
        ("The answer is 65.", "65", 1.0),  # extra text and trailing punctuation
        ("47+18=65", "47", 1.0),  # the FIRST integer, even when the model echoes the prompt
        ("65, or maybe 64", "65", 1.0),  # several numbers: the first counts
        ("64, or maybe 65", "65", 0.0),
        ("answer: -31", "-31", 1.0),
        ("x-31", "31", 1.0),  # a hyphen between a word and digits is not a sign
        ("-0", "0", 1.0),
        ("\u221231", "-31", 1.0),
        ("1,065 apples", "1065", 1.0),  # thousands separators in exact groups of three
        ("1,06", "1", 1.0),  # not a thousands group: the integer is 1
        ("1e3", "1000", 0.0),  # the first number is 1e3, which is not an integer literal
        ("1e3", "1", 0.0),  # ... and is not read as its leading digit either
        ("2.5 then 65", "65", 0.0),  # the first number is the answer, and it is not an integer
        ("65.0", "65", 0.0),
        ("\u0666\u0665", "65", 0.0),  # Arabic-Indic digits: no ASCII integer at all
        ("\u0666\u0665 then 7", "7", 1.0),  # ... so the first ASCII integer is read
        ("", "65", 0.0),
        ("no digits here", "0", 0.0),
        ("0065", "65", 1.0),
    ],
)
def test_arithmetic(completion: str, reference: str, expected: float) -> None:
    assert one("arithmetic", completion, reference) == expected


@pytest.mark.parametrize("name", ["arithmetic", "arithmetic_exact_match"])
def test_very_long_numbers_compare_as_digits_without_int_conversion(name: str) -> None:
    # 50,000 digits is past Python's int-from-str guard (4,300 digits): a comparison via int() would raise.
    big = "9" * 50_000
    assert one(name, big, big) == 1.0
    assert one(name, big + "8", big) == 0.0
    assert one(name, "-" + big, "-" + big) == 1.0


@pytest.mark.parametrize("name", ["arithmetic", "arithmetic_exact_match", "countdown"])
def test_non_integer_reference_is_a_data_error_naming_provider_and_sample(name: str) -> None:
    from lightning_rl.errors import RewardError

    with pytest.raises(RewardError, match=rf"reward provider '{name}' failed on sample 1: .*'6\.5' is not an integer"):
        score(name, ["1", "2"], ["1", "6.5"], numbers=[[1], [2]])


def test_integer_and_integral_float_references_are_read() -> None:
    assert score("arithmetic", ["65", "65", "3"], [65, 65.0, 3]) == [1.0, 1.0, 1.0]


def test_arithmetic_task_references_score_one() -> None:
    rows = ArithmeticTask(ops="+-*").rows(seed=3, count=200)
    references = [row["reference"] for row in rows]
    assert any(ref.startswith("-") for ref in references)  # the adversarial case the task really produces
    assert score("arithmetic_exact_match", references, references) == [1.0] * 200
    assert score("arithmetic", [f"It is {r}." for r in references], references) == [1.0] * 200


@given(st.integers(min_value=-(10**30), max_value=10**30), st.text(alphabet=" \t\n", max_size=3))
def test_exact_match_accepts_any_integer_with_whitespace(value: int, pad: str) -> None:
    assert one("arithmetic_exact_match", f"{pad}{value}{pad}", str(value)) == 1.0
    assert one("arithmetic_exact_match", f"{value + 1}", str(value)) == 0.0


@given(st.integers(min_value=-(10**12), max_value=10**12), st.sampled_from(["The answer is ", "= ", "**", "\n"]))
def test_arithmetic_reads_the_integer_after_prose(value: int, prefix: str) -> None:
    assert one("arithmetic", f"{prefix}{value}. Then 7.", str(value)) == 1.0


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        ("Paris", "paris", 1.0),
        ("  Paris.  ", "Paris", 1.0),
        ("New   York", "new york", 1.0),
        ("Cafe\u0301", "Caf\u00e9", 1.0),  # NFC: decomposed and composed e-acute agree
        ("\uff16\uff15", "65", 0.0),  # NFC does not turn full-width digits into ASCII
        ("Paris, France", "Paris", 0.0),
        ("", "", 1.0),
        ("", "x", 0.0),
    ],
)
def test_exact_match(completion: str, reference: str, expected: float) -> None:
    assert one("exact_match", completion, reference) == expected


def test_nonempty_and_constant_need_no_reference() -> None:
    assert score("nonempty", ["x", "", " \n\t", "0"]) == [1.0, 0.0, 0.0, 1.0]
    assert score("constant", ["x", ""]) == [1.0, 1.0]
    assert score("none", ["65", ""]) == [0.0, 0.0]


def test_correct_and_incorrect_values_set_the_scale() -> None:
    assert score("arithmetic", ["65", "1"], ["65", "65"], correct=2.5, incorrect=-0.5) == [2.5, -0.5]
    assert score("constant", ["x"], correct=0.3) == [0.3]
    # PPO's none is all zeros whatever the scale
    assert score("none", ["x"], correct=2.0, incorrect=1.0) == [0.0]
