"""Every on-policy method runs with the vLLM backends by changing one key, and no engine process outlives fit."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from rollout_testutil import wait_for_no_children

from lightning_rl.cli import RLCLI

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--model.max_steps=2", "--run.wandb=false", "--trainer.enable_progress_bar=false"]
PPO_SMALL = ["--model.ppo.batch_size=8", "--model.ppo.mini_batch_size=4", "--model.ppo.epochs=1"]


def leftover_processes() -> list[str]:
    """Descendants of this test process still running once those already exiting are given time to go."""
    return wait_for_no_children(exclude=set(), timeout=30.0)


def metrics(root: Path) -> list[dict[str, str]]:
    (path,) = list(root.rglob("metrics.csv"))
    with open(path) as f:
        return list(csv.DictReader(f))


def ray_running() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@pytest.mark.parametrize(
    "backend", [pytest.param("vllm", marks=pytest.mark.vllm), pytest.param("vllm_ray", marks=pytest.mark.ray)]
)
def test_ppo_trains_with_a_vllm_backend_and_leaves_nothing_running(tmp_path, backend):
    RLCLI(
        args=[
            "fit",
            "--config",
            str(REPO / "configs" / "ppo_arith_tiny.yaml"),
            f"--model.rollout.backend={backend}",
            *PPO_SMALL,
            *SMALL,
            f"--run.root={tmp_path}",
        ]
    )
    rows = metrics(tmp_path)
    assert len(rows) == 2
    assert float(rows[-1]["weight_sync/bytes"]) > 0
    assert float(rows[0]["weight_sync/max_logprob_diff"]) <= 1e-4  # the first sync's parity check
    assert not leftover_processes()
    assert not ray_running()


@pytest.mark.ray
def test_a_failing_fit_tears_the_engines_down(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    with pytest.raises(Exception, match="this reward always fails|failing_reward"):
        RLCLI(
            args=[
                "fit",
                "--config",
                str(REPO / "configs" / "ppo_arith_tiny.yaml"),
                "--model.rollout.backend=vllm_ray",
                "--model.reward.terminal_callable=failing_reward:explode",
                *PPO_SMALL,
                *SMALL,
                f"--run.root={tmp_path}",
            ]
        )
    assert not leftover_processes()
    assert not ray_running()


@pytest.mark.ray
def test_grpo_trains_with_vllm_ray_by_changing_one_key(tmp_path):
    RLCLI(
        args=[
            "fit",
            "--config",
            str(REPO / "configs" / "grpo_arith_tiny.yaml"),
            "--model.rollout.backend=vllm_ray",
            "--model.rollout.dtype=float32",
            "--model.grpo.batch_size=16",
            "--model.grpo.group_size=4",
            *SMALL,
            f"--run.root={tmp_path}",
        ]
    )
    rows = metrics(tmp_path)
    assert len(rows) == 2
    assert float(rows[-1]["weight_sync/bytes"]) > 0
    assert not leftover_processes()
    assert not ray_running()
