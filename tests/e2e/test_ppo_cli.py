"""The PPO walking skeleton end to end through the real CLI: run files, metric columns, which parameters moved."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from lightning_rl.cli import RLCLI

REPO = Path(__file__).resolve().parents[2]
PPO_CONFIG = REPO / "configs" / "ppo_arith_tiny.yaml"
SFT_CKPT = REPO / "checkpoints" / "sft_arith_tiny"
SMALL = [
    "--model.ppo.batch_size=8",
    "--model.ppo.mini_batch_size=4",
    "--model.ppo.epochs=1",
    "--model.rollout.backend=hf",
    "--model.rollout.max_tokens=6",
    "--model.max_steps=2",
]
REQUIRED_COLUMNS = {
    "step",
    "train/reward_mean",
    "train/response_len_mean",
    "train/policy_loss",
    "train/value_loss",
    "train/kl_mean",
    "train/clip_frac",
    "train/entropy",
    "optim/policy_optimizer_step",
    "optim/critic_optimizer_step",
    "time/rollout",
    "time/reward",
    "time/reference",
    "time/critic",
    "time/update",
    "time/step",
}

pytestmark = pytest.mark.integration


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("config_resolved.yaml"))


def read_metrics(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def fit(tmp_path: Path, *extra: str) -> RLCLI:
    return RLCLI(args=["fit", "--config", str(PPO_CONFIG), *SMALL, f"--run.root={tmp_path}", *extra])


def test_fit_writes_run_files_and_moves_policy_and_critic_only(tmp_path):
    cli = fit(tmp_path, "--run.wandb=true")
    (run_dir,) = run_dirs(tmp_path)
    assert (run_dir / "provenance.json").is_file()
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert {"config_sha256", "git_commit", "python", "packages", "argv"} <= provenance.keys()
    assert "torch" in provenance["packages"] and "lightning" in provenance["packages"]
    assert list((run_dir / "wandb").glob("offline-run-*")), "W&B must log offline without an API key"

    rows = read_metrics(run_dir)
    assert [int(float(r["step"])) for r in rows] == [1, 2]  # step = outer iteration, not global_step
    assert REQUIRED_COLUMNS <= set(rows[0])
    assert float(rows[-1]["optim/policy_optimizer_step"]) == 4.0  # 2 iterations x 2 minibatches

    start = load_file(str(SFT_CKPT / "model.safetensors"))
    policy = {k: v for k, v in cli.model.policy.model.state_dict().items()}
    reference = {k: v for k, v in cli.model.reference.model.state_dict().items()}
    moved = [k for k in start if k in policy and not torch.equal(_full(policy[k]), start[k])]
    assert moved, "no policy parameter moved"
    assert all(torch.equal(_full(reference[k]), start[k]) for k in start if k in reference), "the reference moved"
    critic_start = {k.removeprefix("model."): v for k, v in start.items() if k.startswith("model.")}
    critic = cli.model.critic.model.model.state_dict()
    assert any(not torch.equal(_full(critic[k]), v) for k, v in critic_start.items() if k in critic), (
        "critic did not move"
    )


def test_resolved_config_is_a_valid_config(tmp_path):
    fit(tmp_path / "first", "--model.max_steps=1", "--run.wandb=false")
    (run_dir,) = run_dirs(tmp_path / "first")
    resolved = run_dir / "config_resolved.yaml"
    assert yaml.safe_load(resolved.read_text())["model"]["init_args"]["max_steps"] == 1
    fit(tmp_path / "second", "--config", str(resolved), f"--run.root={tmp_path / 'second'}")
    (second,) = run_dirs(tmp_path / "second")
    assert len(read_metrics(second)) == 1


def test_same_seed_same_metrics_and_weights(tmp_path):
    finals = []
    metrics = []
    for name in ("a", "b"):
        cli = fit(tmp_path / name, "--run.wandb=false")
        finals.append({k: _full(v).clone() for k, v in cli.model.policy.model.state_dict().items()})
        (run_dir,) = run_dirs(tmp_path / name)
        metrics.append([{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run_dir)])
    assert metrics[0] == metrics[1]
    assert finals[0].keys() == finals[1].keys()
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])


def test_validate_prints_the_plan():
    out = subprocess.run(
        [sys.executable, "-m", "lightning_rl", "validate", "--config", str(PPO_CONFIG)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "optimizer steps per iteration" in out.stdout and "rollout backend" in out.stdout


def test_validate_refuses_a_minibatch_that_does_not_divide_the_batch():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_rl",
            "validate",
            "--config",
            str(PPO_CONFIG),
            "--model.ppo.mini_batch_size=7",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode != 0
    assert "mini_batch_size" in out.stderr and "batch_size" in out.stderr
    assert "Traceback" not in out.stderr


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def test_critic_warmup_leaves_the_actor_byte_unchanged(tmp_path):
    cli = fit(tmp_path, "--model.critic_warmup_iterations=1", "--model.max_steps=1", "--run.wandb=false")
    (run_dir,) = run_dirs(tmp_path)
    (row,) = read_metrics(run_dir)
    assert float(row["train/actor_warmup"]) == 1.0
    assert row.get("optim/policy_optimizer_step", "") == ""  # absent on a critic-only iteration, not repeated
    assert float(row["optim/critic_optimizer_step"]) == 2.0
    assert cli.model.policy_version == 0
    start = load_file(str(SFT_CKPT / "model.safetensors"))
    policy = cli.model.policy.model.state_dict()
    assert all(torch.equal(_full(policy[k]), start[k]) for k in start if k in policy)
    (policy_opt, _) = cli.model.optimizers()
    assert not policy_opt.optimizer.state, "the actor's optimizer state must stay untouched during warmup"
