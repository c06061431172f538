"""Reward-rule throughput: score 100,000 completions per built-in rule and print completions/s.

Run: .venv/bin/python benchmarks/rewards.py [--n 100000] [--seed 0]
Target: >= 20,000 completions/s for every rule but gsm8k (which may call math-verify for LaTeX answers). The last line
is ``slowest_rule=<name> slowest_completions_s=<f>``. Timing goes through the public ``score`` API, so it includes
building the per-sample rows and the finiteness check, not just the rule.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from lightning_rl.data.arithmetic import ArithmeticTask
from lightning_rl.rewards import score

Workload = tuple[list[str], list[str], dict[str, Any]]


def _arithmetic(n: int, rng: random.Random, exact: bool) -> Workload:
    rows = ArithmeticTask(ops="+-*").rows(seed=rng.randrange(1 << 30), count=n)
    references = [row["reference"] for row in rows]
    completions = []
    for ref in references:
        roll = rng.random()
        answer = ref if roll < 0.5 else str(int(ref) + rng.choice([-1, 1, 10]))
        completions.append(answer if exact or roll < 0.25 else f"{row_prompt(rng)} so the answer is {answer}.")
    return completions, references, {}


def row_prompt(rng: random.Random) -> str:
    return rng.choice(["Let me compute.", "Adding the ones column first,", "Carry the one:", ""])


def _gsm8k(n: int, rng: random.Random) -> Workload:
    completions, references = [], []
    for i in range(n):
        a, b = rng.randint(1, 2000), rng.randint(1, 2000)
        gold = a * b
        references.append(f"{a} * {b} = {gold}\n#### {gold}")
        answer = gold if rng.random() < 0.5 else gold + rng.randint(1, 9)
        roll = rng.random()
        if roll < 0.005:  # LaTeX answers go to the math-verify fallback; each one is distinct (no parse cache hits)
            completions.append(f"The product is $\\boxed{{\\frac{{{2 * answer}}}{{2}}}}$ ({i})")
        elif roll < 0.5:
            completions.append(f"First {a} times {b}. That gives {answer:,} in total.\n#### {answer:,}")
        else:
            completions.append(f"We have {a} groups of {b}, so {a} * {b} = {answer}.")
    return completions, references, {}


def _countdown(n: int, rng: random.Random) -> Workload:
    completions, references, numbers = [], [], []
    for _ in range(n):
        given = [rng.randint(1, 99) for _ in range(4)]
        a, b, c, d = given
        target = (a + b) * c - d
        expression = f"({a} + {b}) * {c} - {d}" if rng.random() < 0.5 else f"({a} * {b}) - {c} / {d}"
        completions.append(f"<think>try combining them</think>\n<answer>{expression}</answer>")
        references.append(str(target))
        numbers.append(given)
    return completions, references, {"numbers": numbers}


def _strings(n: int, rng: random.Random) -> Workload:
    words = ["Paris", "London", "new york", "Tokyo.", "  berlin ", "Rome", "", "Madrid!"]
    completions = [rng.choice(words) for _ in range(n)]
    references = [rng.choice(words) for _ in range(n)]
    return completions, references, {}


WORKLOADS: dict[str, Callable[[int, random.Random], Workload]] = {
    "arithmetic_exact_match": lambda n, rng: _arithmetic(n, rng, exact=True),
    "none": _strings,
    "arithmetic": lambda n, rng: _arithmetic(n, rng, exact=False),
    "gsm8k": _gsm8k,
    "countdown": _countdown,
    "exact_match": _strings,
    "nonempty": _strings,
    "constant": _strings,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="completions per rule")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rates: dict[str, float] = {}
    for name, make in WORKLOADS.items():
        completions, references, columns = make(args.n, random.Random(f"{args.seed}:{name}"))
        start = time.perf_counter()
        scores = score(name, completions, references, **columns)
        elapsed = time.perf_counter() - start
        rates[name] = args.n / elapsed
        mean = sum(scores) / len(scores)
        print(f"{name:<24} {rates[name]:>12,.0f} completions/s  ({elapsed:.3f} s, mean score {mean:.3f})")
    slowest = min(rates, key=rates.__getitem__)
    print(f"slowest_rule={slowest} slowest_completions_s={rates[slowest]:.1f}")


if __name__ == "__main__":
    main()
