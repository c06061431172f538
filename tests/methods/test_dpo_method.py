"""The DPO method: its refusals, its plan, exact gradient accumulation, and a short real CLI run."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lightning_rl.cli import RLCLI
from lightning_rl.data.preference import synthetic_pairs
from lightning_rl.errors import ConfigError
from lightning_rl.methods.dpo import DPO
from lightning_rl.roles import PolicyModule, ReferenceModule
from lightning_rl.roles.common import load_tokenizer

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "dpo_tiny.yaml"
SFT_CKPT = REPO / "checkpoints" / "sft_arith_tiny"


def make_dpo(**kwargs) -> DPO:
    return DPO(policy=PolicyModule("tiny"), reference=ReferenceModule("tiny"), **kwargs)


# ----- config ---------------------------------------------------------------------------------------------------------
REFUSALS = [
    ({"beta": 0.0}, "model.beta must be a positive finite number"),
    ({"beta": -0.1}, "model.beta must be a positive finite number"),
    ({"beta": math.inf}, "model.beta must be a positive finite number"),
    ({"beta": math.nan}, "model.beta must be a positive finite number"),
    ({"label_smoothing": 0.5}, r"model.label_smoothing must be in \[0, 0.5\)"),
    ({"label_smoothing": -0.1}, r"model.label_smoothing must be in \[0, 0.5\)"),
    ({"batch_size": 0}, "model.batch_size and model.grad_accum must be >= 1"),
    ({"grad_accum": 0}, "model.batch_size and model.grad_accum must be >= 1"),
    ({"batch_size": 6, "grad_accum": 4}, "model.batch_size=6 is not divisible by model.grad_accum=4"),
    ({"max_steps": 0}, "model.max_steps must be >= 1"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("kwargs", "message"), REFUSALS, ids=[str(k) for k, _ in REFUSALS])
def test_config_refusals_name_the_key(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_dpo(**kwargs)


@pytest.mark.unit
def test_plan_batch_arithmetic() -> None:
    lines = make_dpo(batch_size=16, grad_accum=2, max_steps=7).plan(2).lines
    assert lines["pairs per iteration"] == 16
    assert lines["pairs per process"] == 8
    assert lines["micro-batches per step"] == "2 x 4 pairs (8 sequences per forward)"
    assert lines["iterations"] == 7


@pytest.mark.unit
def test_plan_refuses_uneven_splits() -> None:
    with pytest.raises(ConfigError, match="model.batch_size=6 is not divisible by the 4 processes"):
        make_dpo(batch_size=6).plan(4)
    # 8 pairs over 4 processes is 2 per process, which 4 micro-batches cannot split.
    with pytest.raises(ConfigError, match="2 pairs per process, not divisible by model.grad_accum=4"):
        make_dpo(batch_size=8, grad_accum=4).plan(4)


# ----- the update -----------------------------------------------------------------------------------------------------
def first_step_grads(grad_accum: int, pairs: list[dict]) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    method = make_dpo(batch_size=len(pairs), grad_accum=grad_accum)
    method.configure_model()
    method.tokenizer = load_tokenizer("tiny")
    assert method.policy.model is not None and method.reference.model is not None
    # A reference equal to the policy makes every log-ratio zero; nudge the reference so the loss is not at its
    # symmetric point and the per-pair weights sigmoid(-h) differ between pairs.
    with torch.no_grad():
        for p in method.reference.model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    metrics = method.accumulate_gradients(pairs)
    grads = {n: p.grad.clone() for n, p in method.policy.model.named_parameters() if p.grad is not None}
    assert all(p.grad is None for p in method.reference.model.parameters())
    return grads, metrics


@pytest.mark.unit
def test_grad_accum_gives_the_whole_batch_gradient() -> None:
    pairs = synthetic_pairs(8, seed=3)
    whole, whole_metrics = first_step_grads(1, pairs)
    halves, halves_metrics = first_step_grads(2, pairs)
    assert whole and whole.keys() == halves.keys()
    assert any(g.abs().max() > 1e-4 for g in whole.values())  # the comparison is not between zeros
    for name, g in whole.items():
        torch.testing.assert_close(halves[name], g, rtol=1e-6, atol=1e-6, msg=name)
    for key, value in whole_metrics.items():
        assert halves_metrics[key] == pytest.approx(value, rel=1e-6, abs=1e-6), key


@pytest.mark.unit
def test_teacher_forcing_puts_chosen_then_rejected_with_eos() -> None:
    method = make_dpo()
    method.tokenizer = tok = load_tokenizer("tiny")
    pairs = [{"prompt": "1+1=", "chosen": "2", "rejected": "13"}, {"prompt": "2+2=", "chosen": "4", "rejected": "5"}]
    traj = method.teacher_forced(pairs)
    texts = ["2", "4", "13", "5"]
    for i, text in enumerate(texts):
        want = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert traj.response_ids[i][traj.response_mask[i]].tolist() == want
    assert traj.prompt_ids[0].tolist() == traj.prompt_ids[2].tolist()  # a pair shares its prompt


# ----- CLI run --------------------------------------------------------------------------------------------------------
REQUIRED_COLUMNS = {
    "step",
    "optim/policy_optimizer_step",
    "train/dpo_loss",
    "train/chosen_reward",
    "train/rejected_reward",
    "train/reward_margin",
    "train/reward_accuracy",
    "train/grad_norm_policy",
}


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly FSDP2-sharded DTensor) parameter, on the CPU."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu()


def metrics_rows(root: Path) -> list[dict[str, str]]:
    (run_dir,) = sorted(p.parent for p in root.rglob("config_resolved.yaml"))
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.integration
def test_fit_three_iterations_learns_the_pairs_and_keeps_the_reference(tmp_path: Path) -> None:
    # 8 pairs and a batch of 8: every iteration sees the same pairs, so the margin measures in-sample learning.
    cli = RLCLI(
        args=[
            "fit",
            "--config",
            str(CONFIG),
            "--model.max_steps=3",
            "--model.batch_size=8",
            "--data.synthetic_pairs=8",
            "--model.policy.init_args.optimizer.lr=1e-3",
            f"--run.root={tmp_path}",
            "--run.wandb=false",
            "--trainer.enable_progress_bar=false",
        ]
    )
    rows = metrics_rows(tmp_path)
    assert [int(float(r["step"])) for r in rows] == [1, 2, 3]
    assert REQUIRED_COLUMNS <= set(rows[0]), REQUIRED_COLUMNS - set(rows[0])
    assert [float(r["optim/policy_optimizer_step"]) for r in rows] == [1.0, 2.0, 3.0]
    # Iteration 1 scores the SFT weights against themselves: every log-ratio is 0, so the loss is log 2.
    assert float(rows[0]["train/dpo_loss"]) == pytest.approx(math.log(2), abs=1e-5)
    assert float(rows[0]["train/reward_margin"]) == pytest.approx(0.0, abs=1e-5)
    assert float(rows[2]["train/reward_margin"]) > float(rows[0]["train/reward_margin"]) + 0.01
    assert float(rows[2]["train/dpo_loss"]) < float(rows[0]["train/dpo_loss"])

    start = load_file(str(SFT_CKPT / "model.safetensors"))
    policy = cli.model.policy.model.state_dict()
    reference = cli.model.reference.model.state_dict()
    assert any(k in policy and not torch.equal(full_tensor(policy[k]), v) for k, v in start.items()), "policy frozen"
    unchanged = [k for k, v in start.items() if k in reference]
    assert unchanged and all(torch.equal(full_tensor(reference[k]), start[k]) for k in unchanged)
    assert cli.model.role_steps["policy"] == 3
