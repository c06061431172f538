"""Every check that needs no model, engine or worker: run by ``validate`` and again at the start of ``fit``."""

from __future__ import annotations

from typing import Any

from lightning_rl.roles.common import check_model_path


def preflight(model: Any, datamodule: Any, world_size: int) -> str:
    """Raise a UserError naming the keys of the first broken rule; otherwise return the derived plan as text."""
    plan = model.plan(world_size)
    for name in ("policy", "critic", "reference"):
        role = getattr(model, name, None)
        if role is not None and hasattr(role, "model_path"):
            check_model_path(role.model_path, f"model.{name}.model_path")
    notes: list[str] = []
    data_preflight = getattr(datamodule, "preflight", None)
    if callable(data_preflight):
        notes.extend(data_preflight() or [])
    reward = getattr(model, "reward_config", None)
    if reward is not None:
        from lightning_rl.rewards import check_reward_needs

        reward.validate_imports()
        supplies = getattr(datamodule, "supplies_reference", None)
        check_reward_needs(set(reward.needs()), bool(supplies()) if callable(supplies) else False, "model.reward")
    text = plan.render()
    if notes:
        text += "\nwarnings:\n" + "\n".join(f"  - {n}" for n in notes)
    return text
