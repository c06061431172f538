"""The string-level rules: PPO's ``arithmetic_exact_match`` and the shared ``arithmetic``, ``exact_match``, ``nonempty``
and ``constant`` rules. Each judge returns 1.0 (correct) or 0.0; the caller maps that onto the configured scale.

Digits are ASCII ``0-9`` only: Arabic-Indic (``٦٥``), full-width (``６５``) and other Unicode digits are not read as
numbers, so a completion written in them scores as having no number. Signs are ``+``, ``-`` and U+2212 (``−``).
Integers are compared as canonical digit strings, never through ``int()``: a 10,000-digit completion costs a string
comparison, not Python's int-conversion guard, and ``-0`` equals ``0``.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

from lightning_rl.rewards.provider import Row, Rule

_INTEGER_LITERAL = re.compile(r"\s*([+\-\u2212]?)([0-9]+)\s*")
"""A completion (or reference) that is nothing but an integer; surrounding whitespace allowed."""

_FIRST_NUMBER = re.compile(
    r"(?P<sign>(?<![0-9A-Za-z])[+\-\u2212])?"  # a sign counts unless it is a hyphen/minus between word characters
    r"(?P<int>[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)"  # thousands separators only in exact groups of three
    r"(?P<frac>\.[0-9]+)?(?P<exp>[eE][+\-]?[0-9]+)?"
)
"""The first number token. ``65.`` is the integer 65 (a trailing full stop is punctuation); ``2.5`` and ``1e3`` are
numbers but not integer literals."""


def canonical_integer(sign: str, digits: str) -> str:
    """``"-", "007"`` -> ``"-7"``; ``"-", "0"`` -> ``"0"``; thousands commas are removed."""
    digits = digits.replace(",", "").lstrip("0") or "0"
    return digits if digits == "0" or sign == "+" or not sign else "-" + digits


def reference_text(value: object) -> str:
    """A reference cell as text: strings as-is, integers and integral floats without a trailing ``.0``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise ValueError(f"reference must be text or a number, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float | Fraction):
        return str(value)
    raise ValueError(f"reference must be text or a number, got {type(value).__name__} {value!r}")


def require_reference(reference: str | None) -> str:
    if reference is None:
        raise ValueError("no reference for this sample: the rule needs 'reference' (set data.response_column)")
    return reference


def reference_integer(reference: str | None) -> str:
    """The reference as a canonical integer; a reference that is not an integer is a data error, not a wrong answer."""
    match = _INTEGER_LITERAL.fullmatch(require_reference(reference))
    if match is None:
        raise ValueError(f"reference {reference!r} is not an integer")
    return canonical_integer(match[1], match[2])


def first_integer(completion: str) -> str | None:
    """The first number in ``completion`` as a canonical integer, or None when there is none or it is not an integer
    literal (``2.5``, ``1e3``): the first number is the answer, and a non-integer answer is not read as its digits."""
    match = _FIRST_NUMBER.search(completion)
    if match is None or match["frac"] or match["exp"]:
        return None
    return canonical_integer(match["sign"] or "", match["int"])


def judge_arithmetic_exact_match(completion: str, reference: str | None, row: Row) -> float:
    """PPO's format-strict matcher: the completion is nothing but an integer (leading zeros and a sign allowed)."""
    expected = reference_integer(reference)
    match = _INTEGER_LITERAL.fullmatch(completion)
    return 1.0 if match is not None and canonical_integer(match[1], match[2]) == expected else 0.0


def judge_arithmetic(completion: str, reference: str | None, row: Row) -> float:
    """The first number anywhere in the completion, which must be an integer literal equal to the reference."""
    expected = reference_integer(reference)
    return 1.0 if first_integer(completion) == expected else 0.0


def normalise_text(text: str) -> str:
    """NFC, case-folded, runs of whitespace collapsed to one space, trailing full stops dropped.

    NFC (not NFKC) on purpose: NFKC would turn full-width digits into ASCII ones, which the numeric rules refuse to do.
    """
    text = unicodedata.normalize("NFC", text) if not text.isascii() else text
    return " ".join(text.split()).casefold().rstrip(".").rstrip()


def judge_exact_match(completion: str, reference: str | None, row: Row) -> float:
    return 1.0 if normalise_text(completion) == normalise_text(require_reference(reference)) else 0.0


def judge_nonempty(completion: str, reference: str | None, row: Row) -> float:
    return 1.0 if completion.strip() else 0.0


def judge_constant(completion: str, reference: str | None, row: Row) -> float:
    return 1.0


def judge_none(completion: str, reference: str | None, row: Row) -> float:
    return 0.0


ARITHMETIC_EXACT_MATCH = Rule("arithmetic_exact_match", judge_arithmetic_exact_match)
NONE = Rule("none", judge_none, needs=frozenset())
ARITHMETIC = Rule("arithmetic", judge_arithmetic)
EXACT_MATCH = Rule("exact_match", judge_exact_match)
NONEMPTY = Rule("nonempty", judge_nonempty, needs=frozenset())
CONSTANT = Rule("constant", judge_constant, needs=frozenset())
