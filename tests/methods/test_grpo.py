"""The GRPO family: GRPOConfig's refusals and warnings, GRPO's couplings and plan, dynamic sampling's assembly, the
exactness of micro-batch accumulation, and real CLI runs of the base config and every recipe layer."""

from __future__ import annotations

import csv
import itertools
import textwrap
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from lightning_rl.cli import RLCLI
from lightning_rl.errors import ConfigError
from lightning_rl.methods.grpo import GRPO, GRPOConfig, _Stats, concat_trajectories
from lightning_rl.roles import OptimizerConfig, PolicyModule, ReferenceModule
from lightning_rl.rollout import RolloutConfig
from lightning_rl.types import Trajectory

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "configs" / "grpo_arith_tiny.yaml"
RECIPES = {name: REPO / "recipes" / f"{name}.yaml" for name in ("dr_grpo", "gspo", "dapo")}
SFT_CKPT = REPO / "checkpoints" / "sft_arith_tiny"
SMALL = ["--model.grpo.batch_size=8", "--model.grpo.group_size=4", "--model.rollout.max_tokens=6", "--run.wandb=false"]


def make_grpo(reference: bool = False, rollout: RolloutConfig | None = None, eps: float = 1e-8, **grpo) -> GRPO:
    """A GRPO module without a Trainer (nothing is built: the couplings, plan and guard only read the config)."""
    policy = PolicyModule("tiny", optimizer=OptimizerConfig(eps=eps))
    ref = ReferenceModule("tiny") if reference else None
    return GRPO(policy=policy, reference=ref, rollout=rollout, grpo=GRPOConfig(**grpo))


# ----- GRPOConfig refusals --------------------------------------------------------------------------------------------
REFUSALS = [
    ({"batch_size": 10, "group_size": 4}, r"model\.grpo\.batch_size=10 must be a positive multiple of .*group_size=4"),
    ({"group_size": 1, "batch_size": 4}, r"model\.grpo\.group_size must be >= 2"),
    ({"batch_size": 16, "group_size": 4, "mini_batch_size": 6}, r"mini_batch_size=6 does not divide .*batch_size=16"),
    ({"batch_size": 16, "group_size": 4, "micro_batch_size": 5}, r"micro_batch_size=5 does not divide the mini-batch"),
    ({"mu_iterations": 2}, r"model\.grpo\.mu_iterations=2 is refused: only 1"),
    ({"grpo_surrogate": "ppo"}, r"model\.grpo\.grpo_surrogate must be one of clipped, legacy_pg; got 'ppo'"),
    ({"importance_sampling_level": "group"}, r"importance_sampling_level must be one of token, sequence"),
    ({"loss_type": "seq-mean"}, r"model\.grpo\.loss_type must be one of token-mean, .*; got 'seq-mean'"),
    ({"temperature": 0.0}, r"model\.grpo\.temperature=0\.0 is refused"),
    ({"temperature": 0.005}, r"model\.grpo\.temperature=0\.005 is refused.*\(0, 0\.01\)"),
    ({"lower_bound_ratio": 0.5}, r"model\.grpo\.lower_bound_ratio must be 0 \(off\) or > 1, got 0\.5"),
    (
        {"importance_sampling_level": "sequence", "lower_bound_ratio": 3.0},
        r"lower_bound_ratio=3\.0 is refused under model\.grpo\.importance_sampling_level=sequence",
    ),
    ({"kl_beta": 0.1, "kl_coeff_clamp": 25.0}, r"model\.grpo\.kl_coeff_clamp must be in \(0, 20\)"),
    ({"kl_coeff_clamp": 5.0}, r"model\.grpo\.kl_coeff_clamp=5\.0 requires model\.grpo\.kl_beta > 0"),
    ({"kl_beta": -1.0}, r"model\.grpo\.kl_beta must be a finite number >= 0"),
    (
        {"grpo_surrogate": "legacy_pg", "mask_truncated_completions": True},
        r"grpo_surrogate=legacy_pg refuses clipped-only settings.*model\.grpo\.mask_truncated_completions=True",
    ),
    (
        {"grpo_surrogate": "legacy_pg", "importance_sampling_level": "sequence", "lower_bound_ratio": 0.0},
        r"legacy_pg refuses .*importance_sampling_level=sequence",
    ),
    ({"grpo_surrogate": "legacy_pg", "kl_beta": 0.1, "kl_coeff_clamp": 5.0}, r"legacy_pg refuses .*kl_beta=0\.1"),
    ({"min_filter_prefix_tokens": 0}, r"min_filter_prefix_tokens must be null \(off\) or >= 1"),
    (
        {"min_informative_groups": 2, "min_informative_groups_frac": 0.5},
        r"set either model\.grpo\.min_informative_groups or model\.grpo\.min_informative_groups_frac, not both",
    ),
    ({"min_informative_groups_frac": 0.0}, r"min_informative_groups_frac must be in \(0, 1\], got 0\.0"),
    ({"min_informative_groups_frac": 1.5}, r"min_informative_groups_frac must be in \(0, 1\], got 1\.5"),
    ({"batch_size": 16, "group_size": 4, "min_informative_groups": 5}, r"min_informative_groups=5 must be in \[0, "),
    ({"dynamic_sampling_max_extra_rollouts": -1}, r"dynamic_sampling_max_extra_rollouts must be >= 0"),
    ({"dynamic_sampling_on_budget_exhausted": "retry"}, r"dynamic_sampling_on_budget_exhausted must be one of raise"),
    ({"recipe_guard_severity": "fatal"}, r"model\.grpo\.recipe_guard_severity must be one of warn, error"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("kwargs", "message"), REFUSALS, ids=[m[:40] for _, m in REFUSALS])
def test_config_refusals_name_the_key(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GRPOConfig(**kwargs)


GSPO_CLIP = {"importance_sampling_level": "sequence", "lower_bound_ratio": 0.0}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # GSPO's response ratio sits near 1: a token-sized epsilon never clips.
        ({**GSPO_CLIP, "mini_batch_size": 8}, r"epsilon 0\.2 > "),
        # One optimizer step with a re-scored pi_old: every response ratio is exactly 1.
        (
            {
                "importance_sampling_level": "sequence",
                "lower_bound_ratio": 0.0,
                "epsilon_low": 3e-4,
                "epsilon_high": 4e-4,
            },
            r"every response ratio is exactly 1",
        ),
        ({"kl_beta": 0.1}, r"kl_beta=0\.1 without model\.grpo\.kl_coeff_clamp"),
        ({"grpo_surrogate": "legacy_pg", "mini_batch_size": 8}, r"legacy_pg with 4 optimizer steps"),
    ],
)
def test_config_warnings(kwargs: dict, message: str) -> None:
    with pytest.warns(UserWarning, match=message):
        GRPOConfig(**kwargs)


@pytest.mark.unit
def test_derived_properties() -> None:
    cfg = GRPOConfig(batch_size=32, group_size=4, mini_batch_size=8)
    assert (cfg.groups_per_step, cfg.n_mini, cfg.effective_min_informative_groups) == (8, 4, 0)
    assert GRPOConfig(batch_size=32, group_size=4, min_informative_groups=6).effective_min_informative_groups == 6
    # 0.14 of 50 groups names exactly 7 (the float product 7.000000000000001 must not ceil to 8).
    assert (
        GRPOConfig(batch_size=400, group_size=8, min_informative_groups_frac=0.14).effective_min_informative_groups == 7
    )
    # A set fraction is never 0: 0.01 of 8 groups is still one.
    assert (
        GRPOConfig(batch_size=32, group_size=4, min_informative_groups_frac=0.01).effective_min_informative_groups == 1
    )


# ----- GRPO couplings -------------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_temperature_must_equal_the_rollouts_and_both_keys_are_named() -> None:
    with pytest.raises(
        ConfigError, match=r"model\.grpo\.temperature=0\.7 differs from model\.rollout\.temperature=1\.0"
    ):
        make_grpo(temperature=0.7)
    make_grpo(temperature=0.7, rollout=RolloutConfig(temperature=0.7))  # equal: accepted


@pytest.mark.unit
def test_sampling_warps_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"model\.rollout\.top_p=0\.9 / model\.rollout\.top_k=-1: GRPO refuses"):
        make_grpo(rollout=RolloutConfig(top_p=0.9))


@pytest.mark.unit
def test_rollout_logprobs_need_temperature_one() -> None:
    hot = RolloutConfig(temperature=0.7)
    with pytest.raises(ConfigError, match=r"use_rollout_logprobs_for_loss=true needs model\.rollout\.temperature =="):
        make_grpo(rollout=hot, temperature=0.7, use_rollout_logprobs_for_loss=True)
    make_grpo(use_rollout_logprobs_for_loss=True)


@pytest.mark.unit
def test_kl_beta_and_reference_come_together() -> None:
    with pytest.raises(ConfigError, match=r"model\.grpo\.kl_beta=0\.1 needs model\.reference"):
        make_grpo(kl_beta=0.1, kl_coeff_clamp=5.0)
    with pytest.raises(ConfigError, match=r"model\.reference is set but model\.grpo\.kl_beta=0"):
        make_grpo(reference=True)
    make_grpo(reference=True, kl_beta=0.1, kl_coeff_clamp=5.0)


HAZARDS = {"batch_size": 64, "group_size": 8, "min_informative_groups": 3, "loss_type": "seq-mean-token-sum-fixed"}


@pytest.mark.unit
def test_recipe_guard_warns_about_each_hazard() -> None:
    with pytest.warns(UserWarning) as record:
        make_grpo(eps=1e-6, **HAZARDS)
    texts = [str(w.message) for w in record]
    assert any("min_informative_groups=3 is below half of groups_per_step=8" in t for t in texts)
    assert any("model.policy.optimizer.eps=1e-06 > 1e-07" in t for t in texts)


@pytest.mark.unit
def test_recipe_guard_error_refuses_every_hazard_in_one_message() -> None:
    with pytest.raises(ConfigError) as info:
        make_grpo(eps=1e-6, recipe_guard_severity="error", **HAZARDS)
    parts = str(info.value).split("\n\n")
    assert len(parts) == 3  # both hazards, then the sentence naming the knob
    assert "min_informative_groups_frac" in parts[0] and "optimizer.eps=1e-06" in parts[1]
    assert "model.grpo.recipe_guard_severity=error" in parts[2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean pairing neither warns nor raises
        make_grpo(eps=1e-8, recipe_guard_severity="error", loss_type="seq-mean-token-sum-fixed")


# ----- plan -----------------------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_plan_batch_arithmetic() -> None:
    method = make_grpo(
        batch_size=32, group_size=4, mini_batch_size=16, micro_batch_size=4, min_informative_groups_frac=0.5
    )
    lines = method.plan(2).lines
    assert lines["prompts per iteration"] == "8 (4 per process)"
    assert lines["optimizer steps per iteration"] == 2 and method.optimizer_steps_per_iteration() == 2
    assert lines["trajectories per optimizer step"] == "16 (8 per process)"
    assert lines["micro-batch per forward"] == 4
    assert lines["dynamic sampling"].startswith("quota 4 of 8 groups")
    assert method.prompts_per_iteration() == 8


@pytest.mark.unit
def test_plan_refuses_uneven_splits() -> None:
    with pytest.raises(ConfigError, match=r"= 8 prompts is not divisible by the 3 processes"):
        make_grpo(batch_size=32, group_size=4).plan(3)
    with pytest.raises(ConfigError, match=r"mini_batch_size=6 is not divisible by the 4 processes"):
        make_grpo(batch_size=48, group_size=4, mini_batch_size=6).plan(4)
    with pytest.raises(ConfigError, match=r"micro_batch_size=4 does not divide the per-process mini-batch \(6 ="):
        make_grpo(batch_size=48, group_size=4, mini_batch_size=24, micro_batch_size=4).plan(4)


# ----- dynamic sampling -----------------------------------------------------------------------------------------------
def scored_round(scores: list[list[float]], width: int, prompt_width: int = 2) -> Trajectory:
    """A collected round: one row of ``scores`` per prompt (its group), responses ``width`` tokens long."""
    group = len(scores[0])
    b = len(scores) * group
    return Trajectory(
        prompt_ids=torch.full((b, prompt_width), 5, dtype=torch.long),
        prompt_mask=torch.ones((b, prompt_width), dtype=torch.bool),
        response_ids=torch.full((b, width), 7, dtype=torch.long),
        response_mask=torch.ones((b, width), dtype=torch.bool),
        rollout_logprobs=torch.zeros((b, width)),
        scores=torch.tensor([r for row in scores for r in row]),
        group_ids=torch.arange(len(scores)).repeat_interleave(group),
        truncated=torch.zeros(b, dtype=torch.bool),
        texts=["x"] * b,
        batch_size=[b],
    )


def sampler(rounds: list[Trajectory], **grpo) -> GRPO:
    """A GRPO whose collection returns ``rounds[1:]`` in turn (``rounds[0]`` is the iteration's regular draw)."""
    method = make_grpo(batch_size=8, group_size=4, **grpo)
    queue = iter(rounds[1:])
    method.collect_scored = lambda batch: next(queue)  # type: ignore[method-assign]
    method.draw_prompts = lambda k, round_index=1: [{}] * k  # type: ignore[method-assign]
    method.tokenizer = SimpleNamespace(pad_token_id=0)
    return method


@pytest.mark.unit
def test_dynamic_sampling_tops_up_and_assembles_informative_groups_first() -> None:
    first = scored_round([[1, 0, 0, 0], [1, 1, 1, 1]], width=3)  # group 0 informative, group 1 tied
    extra = scored_round([[0, 0, 0, 0], [0, 1, 1, 0]], width=5, prompt_width=3)  # ids 2 (tied), 3 (informative)
    method = sampler([first, extra], min_informative_groups_frac=1.0)
    traj, metrics = method.dynamic_sampling(first, prompts=2)
    assert metrics == {
        "train/grpo_informative_groups": 2.0,
        "train/grpo_dynamic_sampling_extra_rollouts": 1.0,
        "train/grpo_dynamic_sampling_shortfall": 0.0,
    }
    assert sorted(set(traj.group_ids.tolist())) == [0, 3] and traj.batch_size[0] == 8
    # Re-padded to the widest round: prompts on the left, responses on the right.
    assert traj.prompt_ids.shape[1] == 3 and traj.response_ids.shape[1] == 5
    from_first = traj.group_ids == 0
    assert not traj.prompt_mask[from_first, 0].any() and traj.prompt_mask[from_first, 1:].all()
    assert traj.response_mask[from_first, :3].all() and not traj.response_mask[from_first, 3:].any()


@pytest.mark.unit
def test_dynamic_sampling_exhausted_budget_raise_or_proceed() -> None:
    tied = [scored_round([[1, 1, 1, 1], [0, 0, 0, 0]], width=3) for _ in range(3)]
    budget = {"min_informative_groups": 2, "dynamic_sampling_max_extra_rollouts": 2}
    with pytest.raises(RuntimeError, match=r"iteration 1: dynamic sampling found 0 informative .* quota of 2"):
        sampler(tied, **budget).dynamic_sampling(tied[0], prompts=2)
    method = sampler(tied, **budget, dynamic_sampling_on_budget_exhausted="proceed")
    traj, metrics = method.dynamic_sampling(tied[0], prompts=2)
    assert metrics["train/grpo_dynamic_sampling_shortfall"] == 2.0
    assert metrics["train/grpo_dynamic_sampling_extra_rollouts"] == 2.0  # the whole budget was spent
    assert sorted(set(traj.group_ids.tolist())) == [0, 1]  # all tied: filler in arrival order


@pytest.mark.unit
def test_concat_keeps_a_single_part_untouched() -> None:
    part = scored_round([[1, 0, 0, 0]], width=2)
    assert concat_trajectories([part], pad_id=0) is part


# ----- micro-batch accumulation is exact ------------------------------------------------------------------------------
def policy_step_grads(micro_sizes: tuple[int, ...], **grpo) -> list[dict[str, torch.Tensor]]:
    """The gradient one policy_step accumulates at each micro-batch size (float64 tiny model), captured instead of
    stepping, on one fixed batch: 8 trajectories, one empty and one DAPO-masked, pi_old and pi_ref off the policy."""
    reference = grpo.get("kl_beta", 0) > 0
    method = GRPO(
        policy=PolicyModule("tiny", logprob_dtype="float64"),
        reference=ReferenceModule("tiny") if reference else None,
        rollout=RolloutConfig(max_tokens=5),
        grpo=GRPOConfig(batch_size=8, group_size=4, **grpo),
    )
    method.policy.build()
    method.policy.model.double()
    gen = torch.Generator().manual_seed(0)
    b, t = 8, 5
    lengths = torch.tensor([5, 3, 0, 2, 5, 1, 4, 5])  # one empty completion
    traj = Trajectory(
        prompt_ids=torch.randint(3, 100, (b, 3), generator=gen),
        prompt_mask=torch.ones((b, 3), dtype=torch.bool),
        response_ids=torch.randint(3, 100, (b, t), generator=gen),
        response_mask=torch.arange(t)[None] < lengths[:, None],
        advantages=torch.randn(b, generator=gen, dtype=torch.float64),
        group_ids=torch.arange(2).repeat_interleave(4),
        batch_size=[b],
    )
    with torch.no_grad():
        logp = method.policy.score(traj)
    # pi_old and pi_ref off the current policy by up to +-0.3 nats, so clips and the KL gradient act.
    traj.old_logprobs = logp + 0.3 * (2 * torch.rand(b, t, generator=gen, dtype=torch.float64) - 1)
    traj.ref_logprobs = logp + 0.3 * (2 * torch.rand(b, t, generator=gen, dtype=torch.float64) - 1)
    traj.rollout_logprobs = traj.old_logprobs
    loss_mask = traj.response_mask.clone()
    loss_mask[1] = False  # a DAPO-masked (truncated) completion
    captured: list[dict[str, torch.Tensor]] = []

    def capture(role, model, opt, sched, config) -> float:
        captured.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        model.zero_grad(set_to_none=True)
        return 0.0

    method.manual_backward = lambda loss: loss.backward()  # type: ignore[method-assign]
    method.role_optimizer_step = capture  # type: ignore[method-assign]
    for micro in micro_sizes:
        method.grpo.micro_batch_size = micro
        method.policy_step(traj, loss_mask, None, None, _Stats(), first=True)
    assert all(any(g.abs().sum() > 0 for g in grads.values()) for grads in captured)
    return captured


@pytest.mark.unit
@pytest.mark.parametrize(
    "grpo",
    [
        {"loss_type": "token-mean"},
        {"loss_type": "seq-mean-token-sum"},
        {"loss_type": "seq-mean-token-mean", "kl_beta": 0.1, "kl_coeff_clamp": 5.0},
        {"loss_type": "seq-mean-token-sum-fixed"},
        {"loss_type": "seq-mean-token-mean", **GSPO_CLIP},
        {"grpo_surrogate": "legacy_pg", "loss_type": "token-mean"},
    ],
    ids=["token-mean", "seq-sum", "seq-mean+kl", "fixed", "gspo", "legacy_pg"],
)
def test_micro_batches_accumulate_the_whole_batch_gradient(grpo: dict) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # GSPO at n_mini == 1 warns; irrelevant here
        whole, *chunked = policy_step_grads((0, 2, 4), **grpo)
    for grads in chunked:
        assert grads.keys() == whole.keys()
        for name, g in whole.items():
            torch.testing.assert_close(grads[name], g, rtol=1e-9, atol=1e-12)


# ----- CLI runs -------------------------------------------------------------------------------------------------------
def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly FSDP2-sharded DTensor) parameter, on the CPU."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu()


def metrics_rows(root: Path) -> list[dict[str, str]]:
    (run_dir,) = sorted(p.parent for p in root.rglob("config_resolved.yaml"))
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def spread_reward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A reward with a spread inside almost every group whatever the checkpoint has learnt (a hash of the text), so
    the advantages, and therefore the update, are never all zero."""
    module = f"grpo_spread_reward_{next(_modules)}"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            """
            def text_hash(completions, references, prompts, rows):
                return [float(sum(map(ord, c)) % 5) for c in completions]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"--model.reward.terminal_callable={module}:text_hash"


_modules = itertools.count()

REQUIRED_COLUMNS = {
    "step",
    "optim/policy_optimizer_step",
    *(
        f"train/{k}"
        for k in (
            "reward_mean reward_std response_len_mean response_len_max rollout_truncated_frac policy_loss clip_frac "
            "ratio_absdev seq_clip_frac seq_log_ratio_abs valid_sequence_count entropy logprob_gap_mean "
            "logprob_gap_abs_mean logprob_gap_max grad_norm_policy grpo_informative_groups "
            "grpo_dynamic_sampling_extra_rollouts grpo_dynamic_sampling_shortfall"
        ).split()
    ),
}


@pytest.mark.integration
def test_fit_two_iterations_logs_the_metrics_and_moves_the_policy(tmp_path: Path, spread_reward: str) -> None:
    cli = RLCLI(
        args=[
            "fit",
            "--config",
            str(BASE),
            "--model.max_steps=2",
            "--model.grpo.batch_size=16",
            "--model.grpo.group_size=4",
            f"--run.root={tmp_path}",
            "--run.wandb=false",
            spread_reward,
        ]
    )
    rows = metrics_rows(tmp_path)
    assert [int(float(r["step"])) for r in rows] == [1, 2]
    assert REQUIRED_COLUMNS <= set(rows[0]), REQUIRED_COLUMNS - set(rows[0])
    assert [float(r["optim/policy_optimizer_step"]) for r in rows] == [1.0, 2.0]
    assert float(rows[0]["train/valid_sequence_count"]) <= 16
    # n_mini == 1: pi_old is the policy itself, so every ratio is exactly 1 and nothing clips.
    assert float(rows[0]["train/clip_frac"]) == 0.0 and float(rows[0]["train/ratio_absdev"]) < 1e-5
    start = load_file(str(SFT_CKPT / "model.safetensors"))
    policy = cli.model.policy.model.state_dict()
    moved = [k for k, v in start.items() if k in policy and not torch.equal(full_tensor(policy[k]), v)]
    assert moved, "no policy parameter moved"
    assert cli.model.policy_version == 2


@pytest.mark.integration
def test_kl_to_a_reference_is_logged(tmp_path: Path, spread_reward: str) -> None:
    RLCLI(
        args=[
            "fit",
            "--config",
            str(BASE),
            "--model.max_steps=1",
            *SMALL,
            "--model.reference=lightning_rl.roles.ReferenceModule",
            f"--model.reference.init_args.model_path={SFT_CKPT}",
            "--model.grpo.kl_beta=0.05",
            "--model.grpo.kl_coeff_clamp=5.0",
            f"--run.root={tmp_path}",
            spread_reward,
        ]
    )
    (row,) = metrics_rows(tmp_path)
    assert float(row["train/kl_beta"]) == 0.05
    # The reference is the starting policy and pi_theta has not moved yet when the loss is taken: k3 is 0.
    assert abs(float(row["train/kl_mean"])) < 1e-6 and float(row["train/kl_max"]) < 1e-5


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_validates_on_its_base(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = RECIPES[name]
    assert recipe.read_text().splitlines()[0] == "# base: configs/grpo_arith_tiny.yaml"
    RLCLI(args=["validate", "--config", str(BASE), "--config", str(recipe)])
    assert "config OK" in capsys.readouterr().out


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_runs_one_iteration(name: str, tmp_path: Path) -> None:
    extra = ["--model.grpo.mini_batch_size=4"] if name == "gspo" else []
    cli = RLCLI(
        args=["fit", "--config", str(BASE), "--config", str(RECIPES[name]), "--model.max_steps=1", *SMALL, *extra]
        + [f"--run.root={tmp_path}"]
    )
    (row,) = metrics_rows(tmp_path)
    cfg = cli.model.grpo
    if name == "dr_grpo":
        assert cfg.unbiased_advantage and cfg.loss_type == "seq-mean-token-sum-fixed"
        assert cli.model.policy.optimizer_config.eps == 1e-8
    elif name == "gspo":
        assert cfg.importance_sampling_level == "sequence" and cfg.lower_bound_ratio == 0.0
        assert float(row["optim/policy_optimizer_step"]) == 2.0  # n_mini = 8 / 4
    else:
        assert cfg.epsilon_high == 0.28 and cfg.mask_truncated_completions
        assert cfg.effective_min_informative_groups == 1  # ceil(0.5 x 2 groups)
        assert "train/grpo_dynamic_sampling_extra_rollouts" in row


TIED = [
    "--model.reward.terminal=constant",  # every completion scores 1.0: every group is tied
    "--model.grpo.min_informative_groups_frac=1.0",
    "--model.grpo.dynamic_sampling_max_extra_rollouts=1",
    "--model.max_steps=1",
    *SMALL,
]


@pytest.mark.integration
def test_dynamic_sampling_raise_names_the_quota(tmp_path: Path) -> None:
    with pytest.raises(
        RuntimeError, match=r"iteration 1: .*found 0 informative groups after 1 extra rounds.*quota of 2"
    ):
        RLCLI(args=["fit", "--config", str(BASE), *TIED, f"--run.root={tmp_path}"])


@pytest.mark.integration
def test_dynamic_sampling_proceed_trains_on_filler_and_logs_the_shortfall(tmp_path: Path) -> None:
    RLCLI(
        args=["fit", "--config", str(BASE), *TIED, "--model.grpo.dynamic_sampling_on_budget_exhausted=proceed"]
        + [f"--run.root={tmp_path}"]
    )
    (row,) = metrics_rows(tmp_path)
    assert float(row["train/grpo_dynamic_sampling_shortfall"]) == 2.0
    assert float(row["train/grpo_dynamic_sampling_extra_rollouts"]) == 1.0
    assert float(row["train/grpo_informative_groups"]) == 0.0
    # Tied groups have zero advantage: the filler carries no policy gradient.
    assert float(row["train/grad_norm_policy"]) == 0.0
