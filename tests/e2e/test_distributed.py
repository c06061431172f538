"""PPO on 2 CPU processes (FSDP2 over gloo) through the real CLI: it finishes, ranks agree, parameters moved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_ppo_two_processes_agree_and_train(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline"}
    for key in ("LIGHTNING_RL_RUN_DIR", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", "RANK"):
        env.pop(key, None)
    cmd = [
        sys.executable,
        "-m",
        "lightning_rl",
        "fit",
        "--config",
        "configs/ppo_arith_tiny.yaml",
        "--trainer.devices=2",
        "--model.rollout.backend=hf",
        "--model.ppo.batch_size=8",
        "--model.ppo.mini_batch_size=4",
        "--model.ppo.epochs=1",
        "--model.rollout.max_tokens=6",
        "--model.max_steps=2",
        "--run.wandb=false",
        f"--run.root={tmp_path}",
        "--trainer.callbacks+=lightning_rl.callbacks.RankMetricsDump",
        "--trainer.callbacks+=lightning_rl.callbacks.HFExport",
    ]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    (run_dir,) = [p.parent for p in tmp_path.rglob("config_resolved.yaml")]
    ranks = [
        [json.loads(line) for line in (run_dir / f"metrics_rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)
    ]
    assert len(ranks[0]) == len(ranks[1]) == 2
    assert ranks[0] == ranks[1], "ranks disagree on the reduced metrics"
    assert json.loads((run_dir / "provenance.json").read_text())["world_size"] == 2

    start = load_file(str(REPO / "checkpoints" / "sft_arith_tiny" / "model.safetensors"))
    final = load_file(str(run_dir / "hf" / "policy" / "model.safetensors"))
    assert start.keys() == final.keys()
    assert any(not torch.equal(start[k], final[k]) for k in start), "no policy parameter moved"
