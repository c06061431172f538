"""The ``countdown`` rule: an arithmetic expression over the given numbers, each used at most once, equal to the target.

The target is the sample's reference; the numbers are its ``numbers`` column (``nums`` is accepted too, the name the
public Countdown task sets use). The expression is read from the last ``<answer>...</answer>`` when there is one, else
from the last non-blank line; anything from the first ``=`` on is ignored (``(3+5)*2 = 16`` is the expression
``(3+5)*2``), and within what is left the last run of expression characters is taken (so ``So: (3+5)*2`` works).

Completion text is never executed. A recursive-descent parser accepts exactly

    expr   := term (('+' | '-') term)*
    term   := factor (('*' | '/') factor)*          ('×' and '÷' are read as '*' and '/')
    factor := NUMBER | '(' expr ')'

over ASCII digits, so there are no names, calls, attributes, unary operators or powers (``9**9**9`` is a syntax error,
not a computation). Nesting is bounded before parsing, each literal must be a given number (canonical decimal, no
leading zeros) within its multiplicity, and arithmetic is exact rational arithmetic (integer numerator/denominator
pairs, the semantics of ``fractions.Fraction`` without its per-operation gcd; division by zero scores 0).
Since only the given numbers can appear, every intermediate value stays bounded by them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from fractions import Fraction
from numbers import Integral

from lightning_rl.rewards.provider import Row, Rule
from lightning_rl.rewards.rules import reference_integer

MAX_DEPTH = 32
"""Deepest parenthesis nesting parsed; deeper input scores 0 (it also bounds the parser's recursion)."""

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_EXPRESSION_RUN = re.compile(r"[0-9+\-*/×÷()\s]*[0-9][0-9+\-*/×÷()\s]*")
_TOKEN = re.compile(r"[0-9]+|[-+*/()]")
_ALIASES = str.maketrans({"×": "*", "÷": "/"})

Rational = tuple[int, int]
"""An exact value as (numerator, denominator), denominator never 0 and not reduced: every value is built from at most a
handful of given numbers, so skipping the gcd (Fraction's main cost) cannot blow up."""


class _Reject(Exception):
    """The completion's expression is not acceptable (syntax, a number not given or reused): it scores 0."""


def extract_expression(completion: str) -> str | None:
    """The candidate expression text of a completion (see the module docstring), or None."""
    tagged = _ANSWER_TAG.findall(completion)
    if tagged:
        text = tagged[-1]
    else:
        lines = [line for line in completion.splitlines() if line.strip()]
        if not lines:
            return None
        text = lines[-1]
    runs = _EXPRESSION_RUN.findall(text.partition("=")[0])
    return runs[-1].strip() if runs else None


class _Parser:
    """Evaluates the token list exactly, spending each given number at most once. ``tokens`` ends with a "" sentinel."""

    def __init__(self, tokens: list[str], available: Counter[str]) -> None:
        self.tokens = tokens
        self.index = 0
        self.available = available

    def parse(self) -> Rational:
        value = self._expr()
        if self.tokens[self.index]:
            raise _Reject(f"unexpected {self.tokens[self.index]!r}")
        return value

    def _expr(self) -> Rational:
        n, d = self._term()
        while (op := self.tokens[self.index]) in ("+", "-"):
            self.index += 1
            rn, rd = self._term()
            # a/b +- c/e = (a e +- c b) / (b e)
            n, d = (n * rd + rn * d if op == "+" else n * rd - rn * d), d * rd
        return n, d

    def _term(self) -> Rational:
        n, d = self._factor()
        while (op := self.tokens[self.index]) in ("*", "/"):
            self.index += 1
            rn, rd = self._factor()
            if op == "*":
                n, d = n * rn, d * rd
            elif rn == 0:
                raise ZeroDivisionError
            else:
                n, d = n * rd, d * rn  # (a/b) / (c/e) = (a e) / (b c)
        return n, d

    def _factor(self) -> Rational:
        token = self.tokens[self.index]
        self.index += 1
        if token == "(":
            value = self._expr()
            if self.tokens[self.index] != ")":
                raise _Reject("unbalanced parentheses")
            self.index += 1
            return value
        if self.available.get(token, 0) <= 0:  # operators, ")" and the sentinel are never available numbers
            raise _Reject(f"{token!r} is not a given number, or is used more often than given")
        self.available[token] -= 1
        return int(token), 1


def _evaluate(completion: str, numbers: Counter[str]) -> Rational | None:
    expression = extract_expression(completion)
    if expression is None:
        return None
    tokens = _TOKEN.findall(expression.translate(_ALIASES))  # the run holds only these characters and whitespace
    if expression.count("(") > MAX_DEPTH:
        depth = 0
        for token in tokens:
            depth += (token == "(") - (token == ")")
            if depth > MAX_DEPTH:
                return None
    tokens.append("")
    try:
        return _Parser(tokens, numbers.copy()).parse()
    except (_Reject, ZeroDivisionError):
        return None


def countdown_value(completion: str, numbers: Counter[str]) -> Fraction | None:
    """The exact value of the completion's expression, or None when it is not acceptable or divides by zero.

    ``numbers`` counts the given numbers by their canonical decimal text (``Counter({"3": 2, "5": 1})``).
    """
    value = _evaluate(completion, numbers)
    return None if value is None else Fraction(*value)


def _given_numbers(row: Row) -> Counter[str]:
    numbers = row.get("numbers", row.get("nums"))
    if numbers is None:
        raise ValueError("countdown needs the sample's 'numbers' column (the numbers the expression may use)")
    if isinstance(numbers, str | bytes) or not isinstance(numbers, Iterable):
        raise ValueError(f"countdown 'numbers' must be a list of non-negative integers, got {numbers!r}")
    available: Counter[str] = Counter()
    for number in numbers:
        if type(number) is int:  # the common case first: the ABC check below is slow
            text = str(number)
        elif isinstance(number, str):
            text = number.strip()
        elif isinstance(number, Integral) and not isinstance(number, bool):
            text = str(int(number))  # numpy / torch integers too
        else:
            text = ""
        if not (text.isascii() and text.isdigit()):
            raise ValueError(f"countdown 'numbers' must be non-negative integers, got {number!r}")
        available[text.lstrip("0") or "0"] += 1
    return available


def judge_countdown(completion: str, reference: str | None, row: Row) -> float:
    target = int(reference_integer(reference))
    value = _evaluate(completion, _given_numbers(row))
    return 1.0 if value is not None and value[0] == target * value[1] else 0.0


COUNTDOWN = Rule("countdown", judge_countdown)
