"""The built-in arithmetic task: seeded two-number addition/subtraction prompts with reference answers.

Each row is ``{"prompt": "47+18=", "reference": "65", "completion": ...}``: ``completion`` is the supervised target
(the bare number, or with ``prose_fraction`` sometimes a sentence stating it).

Row ``i`` of a corpus is a pure function of ``(seed, i)``, so any row can be produced again without replaying the
stream; a cursor only needs the row index.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class ArithmeticTask:
    """Prompts like ``"47+18="`` with reference ``"65"``; operands in [0, max_operand]."""

    max_operand: int = 99
    ops: str = "+-"
    num_rows: int = 100_000
    """Rows in one epoch of the corpus (the source wraps after this many)."""
    prose_fraction: float = 0.0
    """Share of rows whose ``completion`` states the answer in a sentence ("The answer is 65.") instead of the bare
    number. SFT trains on ``completion``; PPO's exact-match reward scores a sentence as incorrect."""

    def __post_init__(self) -> None:
        if self.max_operand < 1:
            raise ValueError(f"arithmetic max_operand must be >= 1, got {self.max_operand}")
        if not self.ops or set(self.ops) - set("+-*"):
            raise ValueError(f"arithmetic ops must be a non-empty subset of '+-*', got {self.ops!r}")
        if self.num_rows < 1:
            raise ValueError(f"arithmetic num_rows must be >= 1, got {self.num_rows}")
        if not 0.0 <= self.prose_fraction <= 1.0:
            raise ValueError(f"arithmetic prose_fraction must be in [0, 1], got {self.prose_fraction}")

    def row(self, seed: int, index: int) -> dict[str, str]:
        rng = random.Random(f"arithmetic:{seed}:{index}")
        a = rng.randint(0, self.max_operand)
        b = rng.randint(0, self.max_operand)
        op = rng.choice(self.ops)
        value = a + b if op == "+" else a - b if op == "-" else a * b
        row = {"prompt": f"{a}{op}{b}=", "reference": str(value)}
        if self.prose_fraction and rng.random() < self.prose_fraction:
            row["completion"] = f"The answer is {value}."
        else:
            row["completion"] = str(value)
        return row

    def rows(self, seed: int, count: int | None = None) -> list[dict[str, str]]:
        return [self.row(seed, i) for i in range(self.num_rows if count is None else count)]
