"""The ``gsm8k`` rule: final-answer extraction in the GSM8K convention, with math-verify as the fallback judge.

Answer: the first number after the last ``####`` when the completion has one (a ``####`` followed by no number is no
answer: the rule does not fall back to an earlier number), else the last number in the completion. Numbers are ASCII
digits with optional sign, thousands separators in groups of three (``1,234``), decimals and exponents (``1e3`` is
1000); they are compared exactly as decimals, so ``72``, ``72.0`` and ``+72`` agree and ``-0`` equals ``0``.

The reference gets the same treatment (a full GSM8K solution ending in ``#### 72`` works as a reference). The fast
path decides whenever both sides hold a plain number; math-verify (sympy, ~ms per call) is consulted only when it is
the better judge: the reference is not a plain number (``\\frac{1}{2}``), or the completion's plain-number answer did
not match but the completion contains LaTeX (``\\boxed{\\frac{144}{2}}``).
"""

from __future__ import annotations

import re
import threading
from decimal import Decimal, InvalidOperation

from lightning_rl.rewards.provider import Row, Rule
from lightning_rl.rewards.rules import require_reference

_NUMBER = re.compile(
    r"(?P<sign>(?<![0-9A-Za-z])[+\-\u2212])?"
    r"(?P<int>[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)"
    r"(?P<frac>\.[0-9]+)?(?P<exp>[eE][+\-]?[0-9]+)?"
)
_PLAIN_NUMBER = re.compile(r"\s*\$?\s*" + _NUMBER.pattern + r"\s*%?\s*\.?\s*")
"""A reference (or ``####`` tail) that is nothing but one number, optionally with ``$``, ``%`` or a full stop."""
_LATEX = re.compile(r"\\(?:[A-Za-z]+|\(|\[)")
_MARKER = "####"


def _value(match: re.Match[str] | None) -> Decimal | None:
    """The exact value of a number token; None for no token, or an exponent beyond what Decimal represents."""
    if match is None:
        return None
    sign = "-" if match["sign"] in ("-", "\u2212") else ""
    try:
        return Decimal(sign + match["int"].replace(",", "") + (match["frac"] or "") + (match["exp"] or ""))
    except InvalidOperation:
        return None


def _answer(text: str) -> Decimal | None:
    """The final answer of ``text`` in the GSM8K convention (``#### N``, else the last number), or None."""
    head, marker, tail = text.rpartition(_MARKER)
    if marker:
        return _value(_NUMBER.search(tail))
    last = None
    for match in _NUMBER.finditer(text):
        last = match
    return _value(last)


def _gold(reference: str) -> tuple[str, Decimal | None]:
    """The reference's answer text (after ``####`` when present) and its value when it is a plain number."""
    head, marker, tail = reference.rpartition(_MARKER)
    text = tail if marker else reference
    match = _PLAIN_NUMBER.fullmatch(text)
    return text.strip(), _value(match)


def _parse(text: str) -> list[object]:
    """math-verify's parse, imported lazily (it pulls in sympy); bare LaTeX is retried inside ``$...$``.

    math-verify's timeouts use SIGALRM, which only the main thread may set, so elsewhere (a Ray actor's worker thread)
    it runs without one.
    """
    from math_verify import parse

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    parsed: list[object] = parse(text, parsing_timeout=timeout) or parse(f"${text}$", parsing_timeout=timeout)
    return parsed


def _math_verify(gold: str, answer_text: str) -> bool:
    from math_verify import verify

    gold_parsed = _parse(gold)
    if not gold_parsed:
        raise ValueError(f"reference {gold!r} is neither a number nor an expression math-verify can read")
    answer = _parse(answer_text)
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    return bool(answer) and bool(verify(gold_parsed, answer, timeout_seconds=timeout))


def judge_gsm8k(completion: str, reference: str | None, row: Row) -> float:
    gold_text, gold = _gold(require_reference(reference))
    head, marker, tail = completion.rpartition(_MARKER)
    scope = tail if marker else completion  # an explicit '#### ...' is final: nothing before it is read
    if gold is not None:
        if _answer(completion) == gold:
            return 1.0
        if _LATEX.search(scope) is None:
            return 0.0  # both sides are plain numbers: the fast path is conclusive
    return 1.0 if _math_verify(gold_text, scope) else 0.0


GSM8K = Rule("gsm8k", judge_gsm8k)
