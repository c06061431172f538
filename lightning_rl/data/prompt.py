"""The prompt data module of the on-policy methods (PPO, GRPO family, OPD)."""

from __future__ import annotations

from typing_extensions import override

from lightning_rl.data.config import DataConfig, data_seed_warnings, resolve_data_seed
from lightning_rl.data.sources import RowSource, build_prompt_source
from lightning_rl.data.stream import CursorDataModule


class PromptDataModule(CursorDataModule):
    """Batches of prompt rows for this rank, forever (epochs wrap), with a cursor that goes into the checkpoint.

    Each row has ``prompt``, ``reference`` when the source supplies one, every other column of the source, and
    ``_index`` (its corpus position) and ``_epoch``. Constructing it parses nothing; ``setup`` loads the source.
    """

    def __init__(
        self,
        data: DataConfig = DataConfig(),  # noqa: B008  (never mutated)
        seed: int = 0,
        rollout_seed: int | None = None,
        data_seed_follows_rollout_seed: bool = False,
        batch_size: int | None = None,
    ) -> None:
        """
        Args:
            data: Where the prompts come from and how they are ordered.
            seed: The run seed; it orders the prompts (shuffle, arithmetic rows) unless the flag below is set.
            rollout_seed: The rollout engine's sampling seed.
            data_seed_follows_rollout_seed: Order the prompts with rollout_seed instead of seed (needs an integer one).
            batch_size: Prompts per rank and batch; normally left unset and derived by the method.
        """
        super().__init__(
            resolve_data_seed(seed, rollout_seed, data_seed_follows_rollout_seed), data.shuffle, batch_size
        )
        self.data = data
        self.seed = seed
        self.rollout_seed = rollout_seed
        self.data_seed_follows_rollout_seed = data_seed_follows_rollout_seed

    @override
    def _build_source(self) -> RowSource:
        data_seed_warnings(self.data.shuffle, self.seed, self.rollout_seed, self.data_seed_follows_rollout_seed)
        return build_prompt_source(self.data, self.data_seed)

    @override
    def _seed_description(self) -> str:
        return (
            f"seed={self.seed}, rollout_seed={self.rollout_seed}, "
            f"data_seed_follows_rollout_seed={str(self.data_seed_follows_rollout_seed).lower()}"
        )
