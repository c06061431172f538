"""``check-data``: validates a whole file exactly as a run reads it; exit 0 with the row count, or 2 with the error."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_rl.data.check import main

pytestmark = pytest.mark.unit


def test_valid_file_prints_the_row_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"prompt": "a"}\n{"prompt": [{"role": "user", "content": "b"}]}\n'))
    assert main([str(path)]) == 0
    assert capsys.readouterr().out == "rows: 2\n"


def test_columns_are_renamed_and_checked_as_a_run_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "1+1=", "answer": "2"}\n{"question": "2+2="}\n')
    assert main([str(path), "--prompt-column", "question"]) == 0
    assert capsys.readouterr().out == "rows: 2\n"
    assert main([str(path), "--prompt-column", "question", "--response-column", "answer"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"{path}:2:1: row 2: the response column 'answer' (data.response_column) is missing\n")


def test_bad_file_prints_file_row_line_column_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}{"prompt": "c"}\n')
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:2:16: a second object starts right where row 2 ends")


def test_missing_file_and_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "absent.jsonl")]) == 2
    assert "cannot read the data file" in capsys.readouterr().err
    assert main([]) == 2
    assert "the following arguments are required: PATH" in capsys.readouterr().err
    assert main([str(tmp_path / "x"), "--prompt-column", ""]) == 2


def test_as_a_module_in_a_subprocess(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.jsonl"
    good.write_text('[{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}]')
    bad.write_bytes(b'{"prompt": "a"}\n{"prompt": [{"role": "user", "content": [{"type": null}]}]}\n\xff\n')
    command = [sys.executable, "-m", "lightning_rl.data.check"]
    ok = subprocess.run([*command, str(good)], capture_output=True, text=True, timeout=120)
    assert (ok.returncode, ok.stdout) == (0, "rows: 3\n")
    failed = subprocess.run([*command, str(bad)], capture_output=True, text=True, timeout=120)
    assert failed.returncode == 2
    assert failed.stderr == (
        f"{bad}:2:1: row 2: prompt[0].content[0].type is null (the null-fill signature of a columnar export; drop null "
        "keys from content parts)\n"
    )
    assert "Traceback" not in failed.stdout + failed.stderr


def test_the_reader_imports_neither_torch_lightning_nor_datasets() -> None:
    code = (
        "import sys, lightning_rl.data as data, lightning_rl.data.check\n"
        "data.read_rows, data.DataConfig, data.project_prompt, data.preflight_data\n"
        "print(sorted(m for m in ('torch', 'lightning', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout == "[]\n"
