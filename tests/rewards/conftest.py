from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_counter = itertools.count()


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Write Python source to a fresh importable module and return its dotted name (removed from sys.modules after)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def write(source: str) -> str:
        name = f"user_rewards_{next(_counter)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)
