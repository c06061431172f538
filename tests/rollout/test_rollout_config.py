"""Engine-free parts of the rollout: knob validation, what reaches ``vllm.LLM``, staleness, the bucket wire format."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from lightning_rl.errors import ConfigError
from lightning_rl.rollout.base import RolloutConfig, StaleRolloutError, check_fresh
from lightning_rl.rollout.ray import cpu_binding, split_evenly
from lightning_rl.rollout.vllm import llm_kwargs
from lightning_rl.rollout.worker_ext import iter_buckets, iter_payloads, tensors_digest
from lightning_rl.types import Completion

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"backend": "sglang"}, "rollout.backend"),
        ({"temperature": -0.5}, "rollout.temperature"),
        ({"temperature": 0.005}, "rollout.temperature"),
        ({"top_p": 0.0}, "rollout.top_p"),
        ({"top_k": -2}, "rollout.top_k"),
        ({"max_tokens": 0}, "rollout.max_tokens"),
        ({"stop": "abc"}, "rollout.stop"),
        ({"replicas": 0}, "rollout.replicas"),
        ({"backend": "vllm", "replicas": 2}, "rollout.replicas"),
        ({"gpu_memory_utilization": 1.5}, "rollout.gpu_memory_utilization"),
        ({"limit_mm_per_prompt": {}}, "rollout.limit_mm_per_prompt"),
        ({"limit_mm_per_prompt": {"images": 2}}, "rollout.limit_mm_per_prompt"),
        ({"limit_mm_per_prompt": {" image": 2}}, "rollout.limit_mm_per_prompt"),
        ({"limit_mm_per_prompt": {"Image": 2}}, "rollout.limit_mm_per_prompt"),
        ({"limit_mm_per_prompt": {"image": True}}, "rollout.limit_mm_per_prompt.image"),
        ({"limit_mm_per_prompt": {"image": -1}}, "rollout.limit_mm_per_prompt.image"),
        ({"limit_mm_per_prompt": {"video": 1.5}}, "rollout.limit_mm_per_prompt.video"),
        ({"compilation_config": {"cudagraph_mode": "FULL"}}, "rollout.compilation_config"),
        ({"compilation_config": [1, 2], "enforce_eager": False}, "rollout.compilation_config"),
        ({"async_scheduling": 1}, "rollout.async_scheduling"),
        ({"max_num_seqs": 0}, "rollout.max_num_seqs"),
        ({"max_num_seqs": True}, "rollout.max_num_seqs"),
        ({"kv_cache_memory_bytes": -1}, "rollout.kv_cache_memory_bytes"),
        ({"load_format": "safetensors"}, "rollout.load_format"),
        ({"custom_all_reduce": True}, "rollout.custom_all_reduce"),
        ({"custom_all_reduce": True, "tensor_parallel_size": 4, "replicas": 2}, "rollout.custom_all_reduce"),
        ({"weight_sync_bucket_bytes": 0}, "rollout.weight_sync_bucket_bytes"),
        ({"colocated_offload": "yes"}, "rollout.colocated_offload"),
        ({"backend": "vllm_ray", "weight_sync_transport": "nixl"}, "rollout.weight_sync_transport"),
        ({"backend": "vllm", "weight_sync_transport": "nccl"}, "rollout.weight_sync_transport"),
    ],
)
def test_bad_knobs_are_refused_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError, match="^" + re.escape(key) + ":"):
        RolloutConfig(**kwargs)


def test_good_knobs_are_accepted():
    config = RolloutConfig(
        backend="vllm_ray",
        temperature=0.0,
        limit_mm_per_prompt={"image": 0, "audio": 3},
        compilation_config={"cudagraph_capture_sizes": [1, 2]},
        enforce_eager=False,
        custom_all_reduce=True,
        tensor_parallel_size=8,
    )
    assert config.limit_mm_per_prompt == {"image": 0, "audio": 3}
    config.check_for_method("grpo")


def test_ppo_refuses_custom_all_reduce():
    config = RolloutConfig(backend="vllm_ray", custom_all_reduce=True, tensor_parallel_size=2)
    with pytest.raises(ConfigError, match=r"rollout\.custom_all_reduce: PPO refuses it"):
        config.check_for_method("ppo")
    RolloutConfig().check_for_method("ppo")


def test_llm_kwargs_forward_optional_knobs_only_when_set():
    plain = llm_kwargs(RolloutConfig(backend="vllm"), "/m", on_gpu=False)
    for key in (
        "limit_mm_per_prompt",
        "compilation_config",
        "async_scheduling",
        "max_num_seqs",
        "kv_cache_memory_bytes",
        "load_format",
        "seed",
        "dtype",
        "enable_sleep_mode",
    ):
        assert key not in plain, key
    assert plain["worker_extension_cls"] == "lightning_rl.rollout.worker_ext.WeightSyncExtension"
    assert plain["logprobs_mode"] == "raw_logprobs" and plain["disable_custom_all_reduce"] is True

    config = RolloutConfig(
        backend="vllm_ray",
        seed=7,
        dtype="bfloat16",
        limit_mm_per_prompt={"image": 2},
        async_scheduling=False,
        max_num_seqs=16,
        kv_cache_memory_bytes=1 << 30,
        load_format="dummy",
        enforce_eager=False,
        compilation_config={"mode": 3},
        logprobs_mode="processed",
        replicas=2,
    )
    full = llm_kwargs(config, "/m", replica=1, on_gpu=True)
    assert full["seed"] == 8  # replica i samples with seed + i
    assert full["limit_mm_per_prompt"] == {"image": 2} and full["async_scheduling"] is False
    assert (full["max_num_seqs"], full["kv_cache_memory_bytes"], full["load_format"]) == (16, 1 << 30, "dummy")
    assert full["compilation_config"] == {"mode": 3} and full["compilation_config"] is not config.compilation_config
    assert full["logprobs_mode"] == "processed_logprobs" and full["dtype"] == "bfloat16"
    assert "enable_sleep_mode" not in full  # Ray engines do not share the trainer's GPU
    assert llm_kwargs(RolloutConfig(backend="vllm"), "/m", on_gpu=True)["enable_sleep_mode"] is True
    nccl = llm_kwargs(RolloutConfig(backend="vllm_ray", weight_sync_transport="nccl"), "/m", on_gpu=True)
    assert nccl["weight_transfer_config"] == {"backend": "nccl"}
    no_offload = RolloutConfig(backend="vllm", colocated_offload=False)
    assert "enable_sleep_mode" not in llm_kwargs(no_offload, "/m", on_gpu=True)


def test_build_engine_hands_the_hf_backend_to_the_method_factory():
    from lightning_rl.rollout.build import build_engine

    sentinel = object()
    assert build_engine(RolloutConfig(backend="hf"), "/m", hf_engine_factory=lambda: sentinel) is sentinel
    with pytest.raises(ConfigError, match="hf_engine_factory"):
        build_engine(RolloutConfig(backend="hf"), "/m")


def _completion(version: int) -> Completion:
    return Completion(0, [1], [2], [-0.1], "length", "x", version)


def test_check_fresh_refuses_a_batch_from_other_weights():
    check_fresh([_completion(3), _completion(3)], 3)
    with pytest.raises(StaleRolloutError, match=r"policy version\(s\) \[2, 3\] but the trainer is at policy_version 3"):
        check_fresh([_completion(3), _completion(2)], 3)


def test_buckets_respect_the_cap_and_round_trip():
    tensors = [(f"w{i}", torch.randn(64, 64)) for i in range(5)]  # 16 KiB each
    assert [len(b) for b in iter_buckets(tensors, 40 << 10)] == [2, 2, 1]
    assert [len(b) for b in iter_buckets(tensors, 1)] == [1] * 5  # a tensor larger than the cap travels alone
    assert [len(b) for b in iter_buckets(tensors, None)] == [5]

    from safetensors.torch import load

    shared = torch.randn(8)
    named = [*tensors, ("alias", shared), ("alias2", shared), ("strided", torch.randn(4, 4).t())]
    received = [kv for payload in iter_payloads(named, 40 << 10) for kv in load(payload).items()]
    assert tensors_digest(received) == tensors_digest(named)
    assert tensors_digest(received) != tensors_digest([*named[:-1], ("strided", torch.zeros(4, 4))])


def test_replica_placement_helpers():
    assert split_evenly(5, 2) == [(0, 3), (3, 5)]
    assert split_evenly(1, 3) == [(0, 1), (1, 1), (1, 1)]
    assert [cpu_binding(i, 1, 2) for i in range(3)] == ["0", "1", "0"]
    assert cpu_binding(1, 2, 8) == "2,3"


def test_importing_the_rollout_modules_does_not_import_vllm_or_ray():
    code = (
        "import sys\n"
        "import lightning_rl.rollout.build, lightning_rl.rollout.vllm, lightning_rl.rollout.ray\n"
        "import lightning_rl.rollout.worker_ext, lightning_rl.weight_sync\n"
        "bad = [m for m in ('vllm', 'ray') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
