"""Prompt and preference data: the file reader, prompt projection, sources, and data modules with a resumable cursor.

Exports resolve lazily, so ``check-data`` and the reader import neither lightning nor datasets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_rl.data.config import DataConfig as DataConfig
    from lightning_rl.data.config import preflight_data as preflight_data
    from lightning_rl.data.config import resolve_data_seed as resolve_data_seed
    from lightning_rl.data.preference import PreferenceDataModule as PreferenceDataModule
    from lightning_rl.data.projection import project_prompt as project_prompt
    from lightning_rl.data.prompt import PromptDataModule as PromptDataModule
    from lightning_rl.data.reader import read_rows as read_rows

_EXPORTS = {
    "DataConfig": "config",
    "preflight_data": "config",
    "resolve_data_seed": "config",
    "PreferenceDataModule": "preference",
    "project_prompt": "projection",
    "PromptDataModule": "prompt",
    "read_rows": "reader",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
