"""Export the trained roles in HF format at the end of fit: ``<run dir>/hf/<role>``."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override


class HFExport(Callback):
    """At the end of fit, gather each named role (collective under FSDP2) and write it with its tokenizer.

    The directory loads with ``transformers.AutoModelForCausalLM`` and ``vllm.LLM``. Only causal-LM roles (the policy)
    export this way; the critic's value head has no HF class.
    """

    def __init__(self, roles: list[str] | None = None, dirpath: str | None = None) -> None:
        """
        Args:
            roles: attribute names of the roles to export (default: policy).
            dirpath: parent directory of the exports (default: <run dir>/hf).
        """
        self.roles = roles or ["policy"]
        self.dirpath = dirpath

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        from lightning_rl.checkpoint.hf_export import export_hf
        from lightning_rl.roles.common import load_tokenizer

        parent = Path(self.dirpath or Path(trainer.default_root_dir) / "hf")
        for name in self.roles:
            role = getattr(pl_module, name)
            state = role.hf_state_dict()  # collective: every rank takes part
            if trainer.is_global_zero:
                export_hf(role, state, load_tokenizer(role.model_path), parent / name)
