"""Reading a local file of rows: the one reader every method and ``check-data`` share.

Accepted layouts, each optionally gzip-compressed (detected by the magic bytes, whatever the file is called):

- one JSON object per line (JSON lines);
- any whitespace-separated stream of objects: an object pretty-printed over several lines is one row, several objects on
  a line are one row each, but two objects with nothing between them (``}{``) are refused;
- one top-level JSON array of objects (the first non-blank character of the file is ``[``).

Every row must be a JSON object. Rows are decoded and handed to ``transform`` (the projection) strictly in file order,
so the first bad row is the one reported, with its 1-based row number and the ``line:column`` where it starts (or where
the JSON breaks), even when a later byte is not UTF-8 or the gzip stream is truncated further on.

Speed: the whole file is decoded once and scanned in place with the C JSON scanner, one call per row; the common JSON
lines case (object, newline, next object) needs no regex and no per-line slicing. Line and column are computed only when
an error is raised.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Callable
from typing import Any, NoReturn

from lightning_rl.errors import DataError

Row = dict[str, Any]
RowTransform = Callable[[Row], Row]

GZIP_MAGIC = b"\x1f\x8b"
# Compressions refused by name: parsing their bytes as text would only produce a confusing JSON error.
_OTHER_COMPRESSIONS: tuple[tuple[bytes, str], ...] = (
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"PK\x03\x04", "zip"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
)
_DECOMPRESS_HINT = {
    "gzip": "gunzip",
    "bz2": "bunzip2",
    "xz": "unxz",
    "zstd": "unzstd",
    "lz4": "unlz4",
    "zip": "unzip",
    "7z": "7z x",
}
_UTF8_BOM = b"\xef\xbb\xbf"
_JSON_WS = re.compile(r"[ \t\n\r]*")


class RowError(DataError):
    """A row that is valid JSON but not a valid row; raised without a position, which the caller adds."""


def sniff_compression(head: bytes) -> str | None:
    """``"gzip"``, the name of a refused compression, or None for plain bytes (``head``: the first 8 bytes or more)."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head[:3] == b"BZh" and head[3:4].isdigit():
        return "bz2"
    for magic, name in _OTHER_COMPRESSIONS:
        if head.startswith(magic):
            return name
    return None


def refuse_compression(path: str, head: bytes, *, inside_gzip: bool = False) -> None:
    """Raise DataError when ``head`` starts a compression other than (outer) gzip."""
    name = sniff_compression(head)
    if name is None or (name == "gzip" and not inside_gzip):
        return
    where = "inside its gzip stream, the file" if inside_gzip else "the file"
    raise DataError(
        f"{path}: {where} is {name}-compressed; only gzip is read. Decompress it ({_DECOMPRESS_HINT[name]} FILE) "
        "and gzip it if you want it compressed."
    )


def read_rows(path: str | os.PathLike[str], transform: RowTransform | None = None) -> list[Row]:
    """Every row of a local file, in file order, each passed through ``transform`` (which raises RowError to refuse it).

    Raises DataError naming the file, the row and ``line:column`` for the first problem in file order.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataError(f"{name}: cannot read the data file ({e.strerror or e}).") from None
    data, barrier_bytes, barrier_msg = _decompress(name, raw)
    return _RowScanner(name, data, barrier_bytes, barrier_msg, transform).scan()


def _decompress(path: str, raw: bytes) -> tuple[bytes, int | None, str | None]:
    """Plain bytes, plus where (byte offset into them) and why the readable data stops early, if it does."""
    refuse_compression(path, raw[:8])
    if not raw.startswith(GZIP_MAGIC):
        return raw, None, None
    out: list[bytes] = []
    rest = raw
    problem: str | None = None
    chunk = 1 << 20  # decompress in chunks so the data before a corrupt block survives: earlier rows are checked first
    while rest:
        member = zlib.decompressobj(wbits=31)  # 31: one gzip member, header and trailer
        after_member = b""
        try:
            for start in range(0, len(rest), chunk):
                out.append(member.decompress(rest[start : start + chunk]))
                if member.eof:
                    after_member = member.unused_data + rest[start + chunk :]
                    break
        except zlib.error as e:
            problem = f"the gzip stream is corrupt ({e})"
            break
        if not member.eof:
            problem = "the gzip stream is truncated (it ends before its end-of-stream marker)"
            break
        rest = after_member
        if rest and not rest.startswith(GZIP_MAGIC):
            if rest.strip(b"\x00"):  # zero padding after the last member is tolerated, as gzip(1) does
                problem = "unexpected bytes after the gzip stream"
            break
    data = b"".join(out)
    refuse_compression(path, data[:8], inside_gzip=True)
    if problem is None:
        return data, None, None
    return data, len(data), f"{problem}; re-create the file with gzip"


class _RowScanner:
    """One pass over decoded text; ``barrier`` is the character offset where readable data ends (bad byte, bad gzip)."""

    def __init__(
        self, path: str, data: bytes, barrier_bytes: int | None, barrier_msg: str | None, transform: RowTransform | None
    ) -> None:
        self.path = path
        self.transform = transform
        if data.startswith(_UTF8_BOM):
            data = data[len(_UTF8_BOM) :]
            barrier_bytes = None if barrier_bytes is None else barrier_bytes - len(_UTF8_BOM)
        try:
            self.text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            # Keep scanning up to the bad byte (lone surrogates stand in for it) so earlier rows are reported first.
            self.text = data.decode("utf-8", "surrogateescape")
            truncated_char = barrier_bytes is not None and e.end >= len(data)
            if not truncated_char:
                barrier_bytes = e.start
                barrier_msg = (
                    f"byte 0x{data[e.start]:02x} (file byte offset {e.start}) is not valid UTF-8; the file must be "
                    "UTF-8 encoded (convert it, e.g. with iconv -t utf-8)"
                )
        self.barrier: int | None = None
        self.barrier_msg = barrier_msg or ""
        if barrier_bytes is not None:
            self.barrier = len(data[:barrier_bytes].decode("utf-8", "surrogateescape"))
        self.rows: list[Row] = []

    # -- error reporting (positions computed only here) -------------------------------------------------------------
    def _position(self, offset: int) -> str:
        line = self.text.count("\n", 0, offset) + 1
        column = offset - (self.text.rfind("\n", 0, offset) + 1) + 1
        return f"{self.path}:{line}:{column}"

    def fail(self, offset: int, what: str, *, row: bool = True) -> NoReturn:
        where = self._position(offset)
        raise DataError(f"{where}: row {len(self.rows) + 1}: {what}" if row else f"{where}: {what}") from None

    def _fail_at_barrier(self) -> NoReturn:
        assert self.barrier is not None
        self.fail(self.barrier, self.barrier_msg)

    # -- decoding --------------------------------------------------------------------------------------------------
    def _decode_row(self, start: int, scan: Callable[[str, int], tuple[Any, int]]) -> tuple[Row, int]:
        """Decode the value at ``start`` (no whitespace there), check it is an object and project it."""
        text, barrier = self.text, self.barrier
        if barrier is not None and start >= barrier:
            self._fail_at_barrier()
        try:
            value, end = scan(text, start)
        except StopIteration as e:  # the C scanner's "Expecting value"
            if barrier is not None and e.value >= barrier:
                self._fail_at_barrier()
            self.fail(e.value, "expected a JSON object" if e.value == start else "invalid JSON: expecting a value")
        except json.JSONDecodeError as e:
            runs_off_truncation = barrier == len(text) and e.msg.startswith("Unterminated string")
            if barrier is not None and (e.pos >= barrier or runs_off_truncation):
                self._fail_at_barrier()
            self.fail(e.pos, f"invalid JSON: {e.msg}")
        except RecursionError:
            self.fail(start, "invalid JSON: nested too deeply to decode")
        if barrier is not None and end > barrier:
            self._fail_at_barrier()
        if type(value) is not dict:
            self.fail(start, f"every row must be a JSON object, got {json_kind(value)}")
        if self.transform is not None:
            try:
                value = self.transform(value)
            except RowError as e:
                self.fail(start, str(e))
        return value, end

    def scan(self) -> list[Row]:
        text = self.text
        pos = _JSON_WS.match(text, 0).end()  # type: ignore[union-attr]
        if pos < len(text) and text[pos] == "[":
            self._scan_array(pos)
        else:
            self._scan_stream(pos)
        if self.barrier is not None:  # a truncated gzip ending on a row boundary is still an error
            self._fail_at_barrier()
        return self.rows

    def _scan_stream(self, pos: int) -> None:
        text, n = self.text, len(self.text)
        scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
        append = self.rows.append
        transform = self.transform
        limit = n if self.barrier is None else self.barrier
        ws = _JSON_WS.match
        while pos < n:
            # The happy path inline (this loop runs once per row); anything unusual goes through _decode_row, which
            # decodes the row again and raises the precise error.
            try:
                value, end = scan(text, pos)
            except (StopIteration, json.JSONDecodeError, RecursionError):
                value, end = None, n + 1
            if end > limit or type(value) is not dict:
                self._decode_row(pos, scan)
                raise AssertionError("unreachable: _decode_row raises for this row")
            if transform is not None:
                try:
                    value = transform(value)
                except RowError as e:
                    self.fail(pos, str(e))
            append(value)
            # fast path: JSON lines, i.e. object, newline, next object
            if end < n and text[end] == "\n":
                pos = end + 1
                if pos < n and text[pos] == "{":
                    continue
            pos = ws(text, end).end()  # type: ignore[union-attr]
            if pos == end and pos < n:
                self._fail_between_rows(end)

    def _fail_between_rows(self, offset: int) -> NoReturn:
        char = self.text[offset]
        if self.barrier is not None and offset >= self.barrier:
            self._fail_at_barrier()
        n = len(self.rows)  # the last good row; the report is about what follows it
        if char in "{[":
            self.fail(
                offset,
                f"a second object starts right where row {n} ends ('}}{{'); separate rows with whitespace, "
                "e.g. one object per line",
                row=False,
            )
        if char == ",":
            self.fail(
                offset,
                f"unexpected ',' after row {n}; rows are separated by whitespace only (to write a list "
                "of rows with commas, wrap them in one top-level [ ] array)",
                row=False,
            )
        self.fail(offset, f"unexpected {char!r} after row {n}; rows must be separated by whitespace", row=False)

    def _scan_array(self, pos: int) -> None:
        text, n = self.text, len(self.text)
        scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
        ws = _JSON_WS.match
        pos = ws(text, pos + 1).end()  # type: ignore[union-attr]
        if pos < n and text[pos] == "]":
            end = pos + 1
        else:
            while True:
                if pos >= n:
                    self._fail_unclosed(pos)
                row, end = self._decode_row(pos, scan)
                self.rows.append(row)
                pos = ws(text, end).end()  # type: ignore[union-attr]
                if pos >= n:
                    self._fail_unclosed(pos)
                if self.barrier is not None and pos >= self.barrier:
                    self._fail_at_barrier()
                if text[pos] == "]":
                    end = pos + 1
                    break
                if text[pos] != ",":
                    self.fail(
                        pos, f"expected ',' or ']' after array element {len(self.rows)}, got {text[pos]!r}", row=False
                    )
                pos = ws(text, pos + 1).end()  # type: ignore[union-attr]
                if pos < n and text[pos] == "]":
                    self.fail(pos, "trailing ',' before the ']' that closes the top-level array", row=False)
        pos = ws(text, end).end()  # type: ignore[union-attr]
        if pos < n:
            if self.barrier is not None and pos >= self.barrier:
                self._fail_at_barrier()
            self.fail(
                pos,
                "unexpected content after the top-level array; a file holds one array or a stream of objects, not both",
                row=False,
            )

    def _fail_unclosed(self, pos: int) -> NoReturn:
        if self.barrier is not None:
            self._fail_at_barrier()
        self.fail(pos, "the top-level array is not closed (missing ']')", row=False)


def json_kind(value: object) -> str:
    """How a decoded JSON value is named in messages: "null", "a number", "an array", ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
