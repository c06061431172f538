"""Every check that needs no model, engine or worker: run by ``validate`` and again at the start of ``fit``."""

from __future__ import annotations

from typing import Any

from lightning_rl.data.config import DataConfig, preflight_data
from lightning_rl.rewards import check_reward_needs
from lightning_rl.roles.common import check_model_path


def preflight(model: Any, datamodule: Any, world_size: int) -> str:
    """Raise a UserError naming the keys of the first broken rule; otherwise return the derived plan as text."""
    plan = model.plan(world_size)
    for name in ("policy", "critic", "reference"):
        role = getattr(model, name, None)
        if role is not None and hasattr(role, "model_path"):
            check_model_path(role.model_path, f"model.{name}.model_path")
    notes: list[str] = []
    data = getattr(datamodule, "data", None)
    supplies_reference = False
    if isinstance(data, DataConfig):
        notes.extend(
            preflight_data(data, datamodule.seed, datamodule.rollout_seed, datamodule.data_seed_follows_rollout_seed)
        )
        supplies_reference = data.supplies_reference()
    reward = getattr(model, "reward_config", None)
    if reward is not None:
        reward.validate_imports()
        where = f"model.reward.terminal={reward.terminal!r}" if not reward.terminal_callable else "model.reward"
        check_reward_needs(set(reward.needs()), supplies_reference, where)
    text = plan.render()
    if notes:
        text += "\nwarnings:\n" + "\n".join(f"  - {n}" for n in notes)
    return text
