"""Prompt projection: which rows are prompts, and the column renames that wire a dataset to rewards and packers.

A prompt is either a non-empty string (one user turn) or a non-empty conversation: a list of ``{"role", "content"}``
objects whose role is a non-empty string and whose content is a non-empty string or a non-empty list of content parts
(turns may mix the two). Validation never rewrites a prompt: the row goes on exactly as it was read.

Content parts are refused when they carry the null-fill signature of a columnar export (Arrow/Parquet infers one struct
type over every part and fills the keys a part lacks with null): a null ``type``, or a null under a payload key such as
``image: null`` on a text part. A chat template reads any present payload key as that modality, so such a part would
render as a spurious image or video placeholder. A null under a part's own optional key (``fps: null`` on a video part)
is not a payload and passes untouched.
"""

from __future__ import annotations

from typing import Any

from lightning_rl.data.reader import Row, RowError, RowTransform
from lightning_rl.data.reader import json_kind as _kind

# Keys that carry a part's content (a modality handle); a null under any of them is the null-fill signature.
PAYLOAD_KEYS = frozenset(
    {"text", "image", "image_url", "video", "video_url", "audio", "audio_url", "input_audio", "url", "path", "base64"}
)


def project_prompt(prompt: Any, column: str = "prompt") -> str | list[dict[str, Any]]:
    """Validate a prompt value and return it unchanged; raise RowError naming the offending element under ``column``."""
    if isinstance(prompt, str):
        if not prompt:
            raise RowError(f"{column!r} is an empty string; a prompt must be non-empty")
        return prompt
    if isinstance(prompt, list):
        if not prompt:
            raise RowError(f"{column!r} is an empty list; a conversation needs at least one turn")
        for t, turn in enumerate(prompt):
            _check_turn(turn, f"{column}[{t}]")
        return prompt
    raise RowError(
        f"{column!r} must be a non-empty string or a list of {{'role', 'content'}} turns, got {_kind(prompt)}"
    )


def _check_turn(turn: Any, where: str) -> None:
    if not isinstance(turn, dict):
        raise RowError(f"{where} must be a {{'role', 'content'}} object, got {_kind(turn)}")
    role = turn.get("role")
    if not isinstance(role, str) or not role:
        got = "missing" if "role" not in turn else _kind(role) if not isinstance(role, str) else "an empty string"
        raise RowError(f"{where}.role must be a non-empty string, got {got}")
    if "content" not in turn:
        raise RowError(f"{where} has no 'content'")
    content = turn["content"]
    if isinstance(content, str):
        if not content:
            raise RowError(f"{where}.content is an empty string")
        return
    if not isinstance(content, list):
        raise RowError(f"{where}.content must be a non-empty string or a list of content parts, got {_kind(content)}")
    if not content:
        raise RowError(f"{where}.content is an empty list of parts")
    for p, part in enumerate(content):
        _check_part(part, f"{where}.content[{p}]")


def _check_part(part: Any, where: str) -> None:
    if not isinstance(part, dict):
        raise RowError(f"{where} must be a content-part object, got {_kind(part)}")
    null_fill = "the null-fill signature of a columnar export; drop null keys from content parts"
    if "type" in part:
        kind = part["type"]
        if kind is None:
            raise RowError(f"{where}.type is null ({null_fill})")
        if not isinstance(kind, str) or not kind:
            raise RowError(f"{where}.type must be a non-empty string, got {_kind(kind)}")
    for key in PAYLOAD_KEYS.intersection(part):
        if part[key] is None:
            label = f"a {part['type']!r} part" if isinstance(part.get("type"), str) else "a part"
            raise RowError(f"{where}.{key} is null on {label} ({null_fill})")


def make_row_projector(prompt_column: str = "prompt", response_column: str | None = None) -> RowTransform:
    """The per-row map of a prompt source: rename ``prompt_column`` -> ``prompt`` and ``response_column`` ->
    ``reference`` (every other column stays), then validate the prompt. Raises RowError."""

    renames = {
        old: new for old, new in ((prompt_column, "prompt"), (response_column, "reference")) if old and old != new
    }

    def rename(row: Row) -> Row:
        if "_index" in row or "_epoch" in row:
            reserved = "_index" if "_index" in row else "_epoch"
            raise RowError(f"column {reserved!r} is reserved (the data module stamps it on every row); rename it")
        if prompt_column not in row:
            raise RowError(f"no {prompt_column!r} column (data.prompt_column); columns: {sorted(row)}")
        if renames:
            row = _renamed(row, renames)
        project_prompt(row["prompt"], prompt_column)
        return row

    if response_column is None:
        return rename

    def rename_with_reference(row: Row) -> Row:
        if row.get(response_column) is None:
            got = "missing" if response_column not in row else "null"
            raise RowError(f"the response column {response_column!r} (data.response_column) is {got}")
        return rename(row)

    return rename_with_reference


def make_preference_projector(prompt_column: str, chosen_column: str, rejected_column: str) -> RowTransform:
    """Rename the three preference columns to ``prompt``/``chosen``/``rejected`` and validate them. Raises RowError."""
    columns = {prompt_column: "prompt", chosen_column: "chosen", rejected_column: "rejected"}

    def project(row: Row) -> Row:
        for column in columns:
            if column not in row:
                raise RowError(f"no {column!r} column; a preference row needs {sorted(columns)}, got {sorted(row)}")
        row = _renamed(row, columns)
        project_prompt(row["prompt"], prompt_column)
        for new, old in (("chosen", chosen_column), ("rejected", rejected_column)):
            value = row[new]
            if isinstance(value, str) and value:
                continue
            if isinstance(value, list) and value:
                for t, turn in enumerate(value):
                    _check_turn(turn, f"{old}[{t}]")
                continue
            raise RowError(f"{old!r} must be a non-empty string or a non-empty list of turns, got {_kind(value)}")
        return row

    return project


def _renamed(row: Row, mapping: dict[str, str]) -> Row:
    """A copy of ``row`` with keys renamed; refuses a rename that would overwrite another column."""
    for old, new in mapping.items():
        if old != new and new in row and new not in mapping:
            raise RowError(
                f"renaming column {old!r} to {new!r} would overwrite the row's own {new!r} column; "
                f"drop or rename that column first"
            )
    return {mapping.get(key, key): value for key, value in row.items()}
