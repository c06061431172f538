"""``python -m lightning_rl check-data PATH``: read and validate a prompt file exactly as a run would.

Prints ``rows: N`` and exits 0, or prints the first problem (file:line:column, row, what is wrong) and exits 2.
"""

from __future__ import annotations

import argparse
import sys

from lightning_rl.data.sources import load_file_rows
from lightning_rl.errors import DataError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lightning_rl check-data",
        description="Read and validate a prompt file exactly as a run reads it (JSON lines, a stream of objects or "
        "one top-level array, optionally gzip-compressed).",
    )
    parser.add_argument("path", metavar="PATH", help="the data file (data.path)")
    parser.add_argument("--prompt-column", default="prompt", help="the prompt column (data.prompt_column)")
    parser.add_argument(
        "--response-column", default=None, help="the ground-truth column, if the run sets data.response_column"
    )
    return parser


def main(argv: list[str]) -> int:
    """Validate the file named in ``argv``; returns the exit status (0 valid, 2 invalid or bad arguments)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed by argparse
        return int(e.code or 0)
    if not args.prompt_column or args.response_column == "":
        print("check-data: column names must be non-empty", file=sys.stderr)
        return 2
    try:
        rows = load_file_rows(args.path, args.prompt_column, args.response_column)
    except DataError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"rows: {len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
