"""Does the demo learn? Runs the demo config end to end and compares early and late reward.

    python benchmarks/ppo_learning.py [extra CLI overrides...]

Last line: ``first5=<mean reward of iterations 1-5> last5=<mean reward of the last 5> minutes=<wall minutes>``.
The bar on the default seed, on a 2-core CPU: last5 - first5 >= 0.15 within 10 minutes.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ppo_learning_") as root:
        env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
        env.pop("LIGHTNING_RL_RUN_DIR", None)
        cmd = [
            sys.executable,
            "-m",
            "lightning_rl",
            "fit",
            "--config",
            str(REPO / "configs" / "ppo_arith_tiny.yaml"),
            f"--run.root={root}",
            "--run.wandb=false",
            *sys.argv[1:],
        ]
        start = time.perf_counter()
        subprocess.run(cmd, cwd=REPO, env=env, check=True)
        minutes = (time.perf_counter() - start) / 60
        (metrics,) = list(Path(root).rglob("metrics.csv"))
        with open(metrics) as f:
            rows = [r for r in csv.DictReader(f) if r.get("train/reward_mean")]
    rewards = [float(r["train/reward_mean"]) for r in sorted(rows, key=lambda r: float(r["step"]))]
    for i, r in enumerate(rewards, 1):
        print(f"iteration {i:3d} reward {r:.3f}")
    first5 = sum(rewards[:5]) / len(rewards[:5])
    last5 = sum(rewards[-5:]) / len(rewards[-5:])
    print(f"first5={first5:.4f} last5={last5:.4f} minutes={minutes:.2f}")


if __name__ == "__main__":
    main()
