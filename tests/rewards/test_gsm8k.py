"""The gsm8k rule: '#### N' else the last number, exact decimal comparison, and the math-verify fallback."""

from __future__ import annotations

import pytest

from lightning_rl.errors import RewardError
from lightning_rl.rewards import gsm8k, score

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        ("#### 72", "72", 1.0),
        ("She sold 48 + 24 = 72 clips.\n#### 72", "72", 1.0),
        ("48 + 24 = 72, so the answer is 72.", "72", 1.0),  # no marker: the last number; trailing full stop
        ("The answer is 72. Check: 3 apples", "72", 0.0),  # several numbers: the last one counts
        ("#### 72. Actually 73", "72", 1.0),  # after the marker, the first number is final
        ("#### 71\n#### 72", "72", 1.0),  # the last marker wins
        ("#### ", "5", 0.0),  # a marker without a number is no answer ...
        ("5 apples\n####", "5", 0.0),  # ... and does not fall back to an earlier number
        ("#### five", "5", 0.0),
        ("#### 1,234", "1234", 1.0),  # thousands separators
        ("It costs $1,234,567.", "1234567", 1.0),
        ("1,2345", "2345", 1.0),  # not a thousands group: '1' then '2345'
        ("#### -3", "-3", 1.0),  # signs
        ("#### \u22123", "-3", 1.0),
        ("#### -0", "0", 1.0),
        ("#### +72", "72", 1.0),
        ("#### 72.0", "72", 1.0),  # decimals compare as values
        ("#### 18.50", "18.5", 1.0),
        ("#### 0.1", "0.10", 1.0),
        ("#### .5", "0.5", 0.0),  # a bare leading-dot decimal is read as the integer 5
        ("#### 1e3", "1000", 1.0),  # exponents are read as values (documented)
        ("#### 1e999999999999999999999", "1", 0.0),  # out of Decimal's range: no answer, no crash
        ("#### 50%", "50", 1.0),
        ("#### \u0667\u0662", "72", 0.0),  # Arabic-Indic digits are not read
        ("#### \uff17\uff12", "72", 0.0),  # full-width digits are not read
        ("", "72", 0.0),
        ("no numbers at all", "72", 0.0),
        ("#### 72", "Natalia sold 48/2 = 24 clips in May.\n#### 72", 1.0),  # a full GSM8K solution as reference
        ("#### 72", "$72.", 1.0),
    ],
)
def test_gsm8k_fast_path(completion: str, reference: str, expected: float, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_fallback(gold: str, answer: str) -> bool:
        raise AssertionError("math-verify must not run when both sides hold plain numbers and there is no LaTeX")

    monkeypatch.setattr(gsm8k, "_math_verify", no_fallback)
    assert score("gsm8k", [completion], [reference]) == [expected]


def test_very_long_numbers() -> None:
    big = "9" * 20_000
    assert score("gsm8k", [f"#### {big}", f"#### {big}8", f"so {big}"], [big] * 3) == [1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        (r"The answer is $\boxed{\frac{144}{2}}$", "72", 1.0),  # plain 144 and 2 mismatch; LaTeX -> math-verify
        (r"So \boxed{73}", "72", 0.0),
        (r"#### \frac{1}{2}", "0.5", 1.0),
        ("0.5", r"\frac{1}{2}", 1.0),  # a reference that is not a plain number is math-verify's call
        (r"\(\frac{3}{6}\)", r"\frac{1}{2}", 1.0),
        ("1/3", r"\frac{1}{2}", 0.0),
    ],
)
def test_math_verify_fallback(completion: str, reference: str, expected: float) -> None:
    assert score("gsm8k", [completion], [reference]) == [expected]


def test_the_marker_scopes_the_fallback_too() -> None:
    # '#### 5' is final: a LaTeX answer before the marker is not consulted
    assert score("gsm8k", [r"\boxed{72} #### 5"], ["72"]) == [0.0]


def test_missing_reference_names_the_sample() -> None:
    with pytest.raises(RewardError, match=r"'gsm8k' failed on sample 0: it needs 'reference'"):
        score("gsm8k", ["#### 1"])
