"""The shared file reader: every accepted layout, every refusal (message and position checked), a round trip."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_rl.data import read_rows
from lightning_rl.data.projection import make_row_projector
from lightning_rl.data.sources import load_file_rows
from lightning_rl.errors import DataError

pytestmark = pytest.mark.unit


def write(tmp_path: Path, content: bytes | str, name: str = "rows.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def refusal(path: Path, **columns: Any) -> str:
    with pytest.raises(DataError) as info:
        load_file_rows(str(path), **columns)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert "Traceback" not in message
    error = info.value  # no json/gzip exception rides along to be printed as a traceback
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    return message


# -- accepted layouts ------------------------------------------------------------------------------------------------


def test_one_object_per_line(tmp_path: Path) -> None:
    path = write(tmp_path, '{"prompt": "1+1=", "id": 1}\n{"prompt": "2+2=", "id": 2}\n')
    assert read_rows(path) == [{"prompt": "1+1=", "id": 1}, {"prompt": "2+2=", "id": 2}]


def test_blank_lines_crlf_and_indentation_are_whitespace(tmp_path: Path) -> None:
    path = write(tmp_path, '\r\n{"prompt": "a"}\r\n\r\n   \t{"prompt": "b"}  \r\n\n')
    assert read_rows(path) == [{"prompt": "a"}, {"prompt": "b"}]


def test_pretty_printed_object_is_one_row_and_several_on_a_line_are_one_row_each(tmp_path: Path) -> None:
    path = write(
        tmp_path, '{\n  "prompt": "a",\n  "meta": {\n    "k": [1, 2]\n  }\n}\n{"prompt": "b"} {"prompt": "c"}\n'
    )
    assert read_rows(path) == [{"prompt": "a", "meta": {"k": [1, 2]}}, {"prompt": "b"}, {"prompt": "c"}]


def test_top_level_array(tmp_path: Path) -> None:
    path = write(tmp_path, '\n\n  [\n  {"prompt": "a"},\n  {"prompt": "b"}\n]\n')
    assert read_rows(path) == [{"prompt": "a"}, {"prompt": "b"}]


def test_empty_array_and_empty_file_read_as_no_rows(tmp_path: Path) -> None:
    assert read_rows(write(tmp_path, " [ ] ", "a.json")) == []
    assert read_rows(write(tmp_path, "\n\n", "b.jsonl")) == []


def test_gzip_is_detected_by_magic_bytes_whatever_the_name(tmp_path: Path) -> None:
    path = write(tmp_path, gzip.compress(b'{"prompt": "a"}\n{"prompt": "b"}\n'), "rows.txt")
    assert read_rows(path) == [{"prompt": "a"}, {"prompt": "b"}]


def test_multi_member_gzip(tmp_path: Path) -> None:
    path = write(tmp_path, gzip.compress(b'{"prompt": "a"}\n') + gzip.compress(b'{"prompt": "b"}\n'))
    assert read_rows(path) == [{"prompt": "a"}, {"prompt": "b"}]


def test_large_multi_member_gzip(tmp_path: Path) -> None:
    # members larger than the reader's decompression chunk, so a member ends in the middle of a chunk
    rows = [{"prompt": os.urandom(32).hex(), "i": i} for i in range(80_000)]
    members = [
        gzip.compress("".join(json.dumps(r) + "\n" for r in part).encode()) for part in (rows[:40_000], rows[40_000:])
    ]
    assert len(members[0]) > 1 << 20
    assert read_rows(write(tmp_path, b"".join(members) + b"\x00" * 8)) == rows


def test_utf8_bom_is_skipped(tmp_path: Path) -> None:
    path = write(tmp_path, b'\xef\xbb\xbf{"prompt": "caf\xc3\xa9"}\n')
    assert read_rows(path) == [{"prompt": "café"}]


# -- refusals --------------------------------------------------------------------------------------------------------


def test_objects_with_no_whitespace_between_them_are_refused_with_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{"prompt": "a"}\n{"prompt": "b"}{"prompt": "c"}\n')
    message = refusal(path)
    assert f"{path}:2:16:" in message and "'}{'" in message and "row 2 ends" in message


def test_comma_separated_objects_are_refused_with_a_hint(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, '{"prompt": "a"},\n{"prompt": "b"}\n'))
    assert ":1:16:" in message and "unexpected ','" in message and "top-level [ ] array" in message


def test_invalid_json_reports_row_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{"prompt": "a"}\n{"prompt": "b",\n "x": }\n')
    assert refusal(path) == f"{path}:3:7: row 2: invalid JSON: expecting a value"


def test_json_error_message_from_the_decoder_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path, '{"prompt": "a" "b"}\n')
    assert refusal(path) == f"{path}:1:16: row 1: invalid JSON: Expecting ',' delimiter"


def test_non_object_row_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '{"prompt": "a"}\n["prompt", "b"]\n')
    assert refusal(path) == f"{path}:2:1: row 2: every row must be a JSON object, got an array"


def test_non_object_array_element_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[{"prompt": "a"},\n "b"]')
    assert refusal(path) == f"{path}:2:2: row 2: every row must be a JSON object, got a string"


def test_garbage_is_refused_as_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, "prompt,reference\n1+1=,2\n")
    assert refusal(path) == f"{path}:1:1: row 1: expected a JSON object"


def test_unclosed_array_trailing_comma_and_content_after_the_array(tmp_path: Path) -> None:
    assert "1:17: the top-level array is not closed" in refusal(write(tmp_path, '[{"prompt": "a"}', "a.json"))
    assert "1:18: trailing ','" in refusal(write(tmp_path, '[{"prompt": "a"},]', "b.json"))
    assert "2:1: unexpected content after the top-level array" in refusal(
        write(tmp_path, '[{"prompt": "a"}]\n{"prompt": "b"}\n', "c.json")
    )
    assert "1:18: expected ',' or ']' after array element 1" in refusal(
        write(tmp_path, '[{"prompt": "a"} {"prompt": "b"}]', "d.json")
    )


def test_first_bad_row_wins_over_a_later_non_utf8_byte(tmp_path: Path) -> None:
    path = write(tmp_path, b'{"prompt": "a"}\n{"prompt": ""}\n{"prompt": "\xff"}\n')
    assert refusal(path) == f"{path}:2:1: row 2: 'prompt' is an empty string; a prompt must be non-empty"


def test_non_utf8_byte_is_reported_at_its_position(tmp_path: Path) -> None:
    path = write(tmp_path, b'{"prompt": "a"}\n{"prompt": "b\xff"}\n{"prompt": ""}\n')
    message = refusal(path)
    assert message.startswith(f"{path}:2:14: row 2: byte 0xff (file byte offset 29) is not valid UTF-8")


def test_non_utf8_byte_between_rows(tmp_path: Path) -> None:
    path = write(tmp_path, b'{"prompt": "a"}\n\xfe\n')
    assert refusal(path).startswith(f"{path}:2:1: row 2: byte 0xfe")


def test_non_utf8_inside_gzip_keeps_file_order(tmp_path: Path) -> None:
    path = write(tmp_path, gzip.compress(b'{"prompt": "a"}\n{"prompt": 7}\n{"prompt": "\xc3"}\n'), "rows.gz")
    assert refusal(path).startswith(f"{path}:2:1: row 2: 'prompt' must be a non-empty string")


@pytest.mark.parametrize(
    ("compress", "name"),
    [(bz2.compress, "bz2"), (lzma.compress, "xz"), (lambda b: b"\x28\xb5\x2f\xfd" + b, "zstd")],
)
def test_other_compressions_are_refused_by_name(tmp_path: Path, compress: Any, name: str) -> None:
    path = write(tmp_path, compress(b'{"prompt": "a"}\n'), "rows.jsonl")
    assert refusal(path).startswith(f"{path}: the file is {name}-compressed; only gzip is read")


def test_compression_inside_gzip_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, gzip.compress(bz2.compress(b'{"prompt": "a"}\n')))
    assert "inside its gzip stream, the file is bz2-compressed" in refusal(path)


def test_truncated_gzip_reports_earlier_bad_rows_first_then_the_truncation(tmp_path: Path) -> None:
    good = gzip.compress(b'{"prompt": "a"}\n' * 50)
    message = refusal(write(tmp_path, good[:-10], "a.gz"))
    assert ": row 50: the gzip stream is truncated" in message or ": row 51: the gzip stream is truncated" in message
    bad_first = gzip.compress(b'{"prompt": "a"}\n{"prompt": []}\n' + b'{"prompt": "a"}\n' * 50)[:-10]
    assert ":2:1: row 2: 'prompt' is an empty list" in refusal(write(tmp_path, bad_first, "b.gz"))


def test_corrupt_gzip_is_a_data_error(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(b'{"prompt": "a"}\n' * 20))
    data[12:20] = b"\xff" * 8
    assert "the gzip stream is corrupt" in refusal(write(tmp_path, bytes(data)))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert "cannot read the data file" in refusal(tmp_path / "absent.jsonl")
    with pytest.raises(DataError, match="cannot read the data file"):
        read_rows(tmp_path)


def test_projection_errors_carry_the_row_position(tmp_path: Path) -> None:
    path = write(tmp_path, '{"question": "q"}\n\n  {"answer": "a"}\n')
    assert refusal(path, prompt_column="question") == (
        f"{path}:3:3: row 2: no 'question' column (data.prompt_column); columns: ['answer']"
    )


def test_empty_file_is_refused_as_a_source(tmp_path: Path) -> None:
    assert refusal(write(tmp_path, "\n")) == f"{write(tmp_path, chr(10))}: the file holds no rows"


def test_deep_nesting_is_a_data_error(tmp_path: Path) -> None:
    path = write(tmp_path, '{"prompt": "a", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    assert refusal(path) == f"{path}:1:1: row 1: invalid JSON: nested too deeply to decode"


# -- the round-trip property -----------------------------------------------------------------------------------------

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3), max_leaves=8
)
_parts = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(min_size=1)}) | st.fixed_dictionaries(
    {"type": st.just("video"), "video": st.text(min_size=1), "fps": st.none() | st.integers(1, 30)}
)
_turns = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant"]),
        "content": st.text(min_size=1) | st.lists(_parts, min_size=1, max_size=3),
    }
)
_prompts = st.text(min_size=1) | st.lists(_turns, min_size=1, max_size=3)
_rows = st.builds(
    lambda prompt, extra: {"prompt": prompt, **extra},
    _prompts,
    st.dictionaries(st.text().filter(lambda k: k not in ("prompt", "_index", "_epoch")), _values, max_size=3),
)


def _layout(rows: list[dict[str, Any]], layout: str, ascii_only: bool) -> str:
    if layout == "lines":
        return "".join(json.dumps(row, ensure_ascii=ascii_only) + "\n" for row in rows)
    if layout == "pretty":
        return "\n".join(json.dumps(row, indent=2, ensure_ascii=ascii_only) for row in rows)
    if layout == "mixed":  # several per line, separated by single spaces or tabs
        return " \t".join(json.dumps(row, ensure_ascii=ascii_only) for row in rows)
    return json.dumps(rows, indent=1, ensure_ascii=ascii_only)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(_rows, max_size=6),
    layout=st.sampled_from(["lines", "pretty", "mixed", "array"]),
    gzipped=st.booleans(),
    ascii_only=st.booleans(),
)
def test_any_valid_rows_in_any_layout_read_back_identical(
    rows: list[dict[str, Any]], layout: str, gzipped: bool, ascii_only: bool
) -> None:
    data = _layout(rows, layout, ascii_only).encode("utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.data"
        path.write_bytes(gzip.compress(data) if gzipped else data)
        assert read_rows(path, make_row_projector()) == rows


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(_rows, min_size=1, max_size=3),
    layout=st.sampled_from(["lines", "pretty", "array"]),
    gzipped=st.booleans(),
    edits=st.lists(
        st.tuples(st.floats(0, 1), st.integers(0, 255), st.sampled_from(["insert", "delete", "cut"])),
        min_size=1,
        max_size=3,
    ),
)
def test_a_damaged_file_reads_or_raises_only_a_data_error(
    rows: list[dict[str, Any]], layout: str, gzipped: bool, edits: list[tuple[float, int, str]]
) -> None:
    data = _layout(rows, layout, ascii_only=False).encode("utf-8")
    damaged = bytearray(gzip.compress(data) if gzipped else data)
    for where, byte, edit in edits:
        k = int(where * len(damaged))
        if edit == "insert":
            damaged[k:k] = bytes([byte])
        elif edit == "delete":
            del damaged[k : k + 1]
        else:
            del damaged[k:]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.data"
        path.write_bytes(bytes(damaged))
        try:
            read_rows(path, make_row_projector())
        except DataError as error:
            assert str(error).startswith(str(path))
            assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
