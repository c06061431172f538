"""Reader throughput against the plainest possible baseline, on 1,000,000 small JSON lines rows.

    .venv/bin/python benchmarks/data_reader.py [--rows N] [--repeats R]

The reader is timed as a run uses it: gzip sniffing, UTF-8 decoding, JSON decoding with positions kept for errors, the
object check, the column rename and prompt validation. The baseline is ``json.loads`` on every line of a text-mode file,
timed in the same process on the same file. Each side takes its best of ``repeats`` runs, alternating. The last line is
``ratio=<reader rows/s / baseline rows/s> reader_rows_s=<f> baseline_rows_s=<f>``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from lightning_rl.data.sources import load_file_rows


def write_rows(path: str, count: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(count):
            a, b = i % 97, i % 89
            f.write(json.dumps({"prompt": f"{a}+{b}=", "reference": str(a + b), "id": i}) + "\n")


def baseline(path: str) -> list[Any]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def reader(path: str) -> list[Any]:
    return load_file_rows(path, "prompt", "reference")


def rate(fn: Callable[[str], list[Any]], path: str, count: int) -> float:
    gc.collect()
    start = time.perf_counter()
    rows = fn(path)
    elapsed = time.perf_counter() - start
    assert len(rows) == count, (fn.__name__, len(rows))
    del rows
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.jsonl")
        write_rows(path, args.rows)
        print(f"file: {args.rows} rows, {os.path.getsize(path) / 1e6:.1f} MB")
        reader_rate = baseline_rate = 0.0
        for repeat in range(args.repeats):
            baseline_rate = max(baseline_rate, rate(baseline, path, args.rows))
            reader_rate = max(reader_rate, rate(reader, path, args.rows))
            print(f"repeat {repeat}: reader {reader_rate:,.0f} rows/s, baseline {baseline_rate:,.0f} rows/s")
    print(
        f"ratio={reader_rate / baseline_rate:.3f} reader_rows_s={reader_rate:.1f} baseline_rows_s={baseline_rate:.1f}"
    )


if __name__ == "__main__":
    main()
