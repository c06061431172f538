"""The ``vllm`` backend: one ``vllm.LLM`` in the trainer process.

``LLMHost`` owns one ``vllm.LLM`` and every call the framework makes on it (sampling, prompt logprobs, the weight-update
lifecycle, sleep/wake, shutdown). The in-process engine below wraps one host; the Ray backend (``rollout/ray.py``) runs
one host per actor. vLLM is imported lazily, inside the host, so importing this module costs nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lightning_rl.errors import ConfigError
from lightning_rl.rollout.base import RolloutConfig, RolloutNotReadyError, Sampling
from lightning_rl.rollout.worker_ext import BucketedWeightUpdates
from lightning_rl.types import Completion

log = logging.getLogger(__name__)

WORKER_EXTENSION = "lightning_rl.rollout.worker_ext.WeightSyncExtension"
LOGPROBS_MODES = {"raw": "raw_logprobs", "processed": "processed_logprobs"}


def llm_kwargs(
    config: RolloutConfig, model_path: str, *, replica: int = 0, on_gpu: bool | None = None
) -> dict[str, Any]:
    """The ``vllm.LLM`` arguments of one engine: the fixed ones plus each optional knob only when it is set."""
    if on_gpu is None:
        on_gpu = torch.cuda.is_available()
    kwargs: dict[str, Any] = {
        "model": model_path,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "enforce_eager": config.enforce_eager,
        "tensor_parallel_size": config.tensor_parallel_size,
        "logprobs_mode": LOGPROBS_MODES[config.logprobs_mode],
        "worker_extension_cls": WORKER_EXTENSION,
        "disable_custom_all_reduce": not config.custom_all_reduce,
    }
    if config.seed is not None:
        kwargs["seed"] = config.seed + replica
    if config.dtype != "auto":
        kwargs["dtype"] = config.dtype
    if config.load_format != "auto":
        kwargs["load_format"] = config.load_format
    optional = {
        "limit_mm_per_prompt": config.limit_mm_per_prompt,
        "async_scheduling": config.async_scheduling,
        "max_num_seqs": config.max_num_seqs,
        "kv_cache_memory_bytes": config.kv_cache_memory_bytes,
    }
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    if config.compilation_config:
        kwargs["compilation_config"] = dict(config.compilation_config)
    if on_gpu and config.backend == "vllm" and config.colocated_offload:
        kwargs["enable_sleep_mode"] = True
    if config.weight_sync_transport == "nccl":
        kwargs["weight_transfer_config"] = {"backend": "nccl"}
    return kwargs


def sampling_params(sampling: Sampling):
    """``vllm.SamplingParams`` for one call: one logprob per generated token (the sampled token's)."""
    from vllm import SamplingParams

    return SamplingParams(
        n=sampling.n,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k if sampling.top_k > 0 else -1,
        max_tokens=sampling.max_tokens,
        stop=list(sampling.stop) or None,
        ignore_eos=sampling.ignore_eos,
        logprobs=0,
    )


@dataclass
class Sample:
    """One completion as the host returns it (plain data, so it crosses a Ray boundary cheaply)."""

    prompt_index: int
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    text: str


class LLMHost:
    """One ``vllm.LLM`` and the calls made on it; lives in the trainer process or in a Ray actor."""

    def __init__(self, kwargs: dict[str, Any], env: dict[str, str] | None = None) -> None:
        cores = os.environ.get("LIGHTNING_RL_CPU_AFFINITY")  # set by the Ray backend for its actor process
        if cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
        from vllm import LLM
        from vllm.platforms import current_platform

        self.logprobs_mode = {v: k for k, v in LOGPROBS_MODES.items()}[kwargs.get("logprobs_mode", "raw_logprobs")]
        # ``env`` reaches the engine's child processes (spawned during construction) without outliving it here.
        if isinstance(kwargs.get("weight_transfer_config"), dict):
            from vllm.config import WeightTransferConfig

            kwargs = {**kwargs, "weight_transfer_config": WeightTransferConfig(**kwargs["weight_transfer_config"])}
        saved = {k: os.environ.get(k) for k in env or {}}
        os.environ.update(env or {})
        try:
            self.llm = LLM(**kwargs)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.is_cpu = bool(current_platform.is_cpu())
        self.can_sleep = bool(kwargs.get("enable_sleep_mode")) and not self.is_cpu
        self.asleep = False
        self.woken: set[str] = set()  # memory regions already restored while asleep
        self.vocab_size = int(self.llm.llm_engine.model_config.get_vocab_size())
        self.dtype: torch.dtype = self.llm.llm_engine.model_config.dtype  # type: ignore[assignment]
        try:
            self._check_modalities(kwargs.get("limit_mm_per_prompt"))
        except BaseException:
            self.close()
            raise

    def _check_modalities(self, limits: dict[str, int] | None) -> None:
        """vLLM silently ignores a modality the model does not take; refuse it instead."""
        if not limits:
            return
        model_config = self.llm.llm_engine.model_config
        supported: set[str] = set()
        if model_config.is_multimodal_model:
            from vllm.multimodal import MULTIMODAL_REGISTRY

            supported = set(MULTIMODAL_REGISTRY.get_processing_info(model_config).get_supported_mm_limits())
        unknown = sorted(set(limits) - supported)
        if unknown:
            raise ConfigError(
                f"rollout.limit_mm_per_prompt: {unknown} not supported by {model_config.model} "
                f"(it takes {sorted(supported) or 'text only'})"
            )

    def ping(self) -> bool:
        return True

    def call_llm(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a ``vllm.LLM`` method by name (the NCCL weight-transfer lifecycle goes through here)."""
        return getattr(self.llm, method)(*args, **kwargs)

    def llm_signature(self, method: str) -> list[str]:
        """Parameter names of a ``vllm.LLM`` method: lets the trainer adapt to the installed vLLM's API."""
        import inspect

        return list(inspect.signature(getattr(self.llm, method)).parameters)

    def info(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size, "dtype": self.dtype, "is_cpu": self.is_cpu}

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: Sampling, offset: int = 0) -> list[Sample]:
        if sampling.logprobs_mode != self.logprobs_mode:
            raise ValueError(
                f"this engine was built with logprobs_mode={self.logprobs_mode!r} (rollout.logprobs_mode) and cannot "
                f"return {sampling.logprobs_mode!r} logprobs per call"
            )
        from vllm.inputs import TokensPrompt

        self.wake_up()
        prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_token_ids]
        outputs = self.llm.generate(prompts, sampling_params(sampling), use_tqdm=False)
        samples = []
        for i, out in enumerate(outputs):
            for c in sorted(out.outputs, key=lambda c: c.index):
                token_ids = list(c.token_ids)
                if c.logprobs is None or len(c.logprobs) != len(token_ids):
                    raise RuntimeError(f"vLLM returned no per-token logprobs for prompt {offset + i}")
                logprobs = [float(step[tok].logprob) for step, tok in zip(c.logprobs, token_ids, strict=True)]  # type: ignore[index]
                if c.finish_reason not in ("stop", "length"):
                    raise RuntimeError(f"vLLM finished prompt {offset + i} with {c.finish_reason!r}")
                samples.append(Sample(offset + i, token_ids, logprobs, c.finish_reason, c.text))
        return samples

    def prompt_logprobs(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        """Raw log p(token_t | tokens_<t) for t >= 1 of each prompt (the probe of the logprob-parity check)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self.wake_up()
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        result = []
        for p, out in zip(prompts, outputs, strict=True):
            steps = out.prompt_logprobs or []
            result.append([float(step[tok].logprob) for step, tok in zip(steps[1:], p[1:], strict=True)])  # type: ignore[index]
        return result

    # ----- weight updates (see worker_ext.WeightSyncExtension) -------------------------------------------------------
    def begin_update(self) -> None:
        if self.asleep and "weights" not in self.woken:  # the reload writes into the weights' device memory
            self.llm.wake_up(tags=["weights"])
            self.woken.add("weights")
        self.llm.collective_rpc("lrl_begin_update")

    def load_bucket(self, payload: bytes) -> int:
        return int(sum(self.llm.collective_rpc("lrl_load_bucket", args=(payload,))))

    def finish_update(self) -> list[dict[str, Any]]:
        results = self.llm.collective_rpc("lrl_finish_update")
        self.llm.reset_prefix_cache()
        return list(results)

    # ----- colocated offload ------------------------------------------------------------------------------------------
    def sleep(self) -> None:
        # Level 1 keeps a host copy of the weights: a step that publishes no update (critic warmup) wakes unchanged.
        if self.can_sleep and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True
            self.woken = set()

    def wake_up(self) -> None:
        if self.asleep:
            self.llm.wake_up(tags=[t for t in ("weights", "kv_cache") if t not in self.woken])
            self.asleep = False

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None  # type: ignore[assignment]
        engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None:
            engine_core.shutdown()
        del llm


def to_completions(
    samples: Iterable[Sample], prompt_token_ids: Sequence[Sequence[int]], version: int
) -> list[Completion]:
    return [
        Completion(
            prompt_index=s.prompt_index,
            prompt_token_ids=list(prompt_token_ids[s.prompt_index]),
            token_ids=s.token_ids,
            logprobs=s.logprobs,
            finish_reason=s.finish_reason,
            text=s.text,
            version=version,
        )
        for s in samples
    ]


class VLLMEngine(BucketedWeightUpdates):
    """The ``vllm`` backend: one in-process ``vllm.LLM`` (its engine core and worker run as child processes).

    ``version`` is the policy_version of the weights the engine holds; every completion is stamped with it. With
    ``load_format=dummy`` the engine refuses to generate until a weight sync commits.
    """

    num_replicas = 1

    def __init__(self, config: RolloutConfig, model_path: str, *, version: int = 0) -> None:
        self.config = config
        self.version = version
        self.ready = config.load_format != "dummy"
        env = {}
        if config.cpu_threads is not None and not torch.cuda.is_available():
            env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{config.cpu_threads - 1}"
        self.host: LLMHost | None = LLMHost(llm_kwargs(config, model_path), env)
        self._logged_cpu_sleep = False

    @property
    def vocab_size(self) -> int:
        return self._host().vocab_size

    @property
    def weight_dtype(self) -> torch.dtype:
        return self._host().dtype

    def _host(self) -> LLMHost:
        if self.host is None:
            raise RuntimeError("the vLLM engine is closed")
        return self.host

    def _check_ready(self) -> None:
        if not self.ready:
            raise RolloutNotReadyError(
                "rollout.load_format=dummy: the engine holds random weights and refuses to generate until the first "
                "weight sync commits (call lightning_rl.weight_sync.sync first)"
            )

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: Sampling) -> list[Completion]:
        self._check_ready()
        samples = self._host().generate(prompt_token_ids, sampling)
        return to_completions(samples, prompt_token_ids, self.version)

    # ----- weight sync target (used by lightning_rl.weight_sync.sync) -------------------------------------------------
    def begin_weight_update(self) -> None:
        self._host().begin_update()

    def load_weight_bucket(self, payload: bytes) -> None:
        self._host().load_bucket(payload)

    def finish_weight_update(self, version: int) -> list[list[dict[str, Any]]]:
        """Commit the buffered weights and publish ``version``; returns, per replica, each worker's load report."""
        results = self._host().finish_update()
        self.version = version
        self.ready = True
        return [results]

    def probe_logprobs(self, prompts: Sequence[Sequence[int]]) -> list[list[list[float]]]:
        """Per replica, per prompt: the engine's raw logprobs of prompt tokens 1..L-1."""
        return [self._host().prompt_logprobs(prompts)]

    # ----- colocated offload ------------------------------------------------------------------------------------------
    def sleep(self) -> None:
        if not self.config.colocated_offload:
            return
        host = self._host()
        if host.is_cpu:
            if not self._logged_cpu_sleep:
                log.info("rollout.colocated_offload: vLLM's CPU build has no sleep mode; the offload cycle is a no-op")
                self._logged_cpu_sleep = True
            return
        host.sleep()

    def wake_up(self) -> None:
        if self.config.colocated_offload and self.host is not None:
            self.host.wake_up()

    def close(self) -> None:
        """Shut the engine core and its workers down (idempotent)."""
        host, self.host = self.host, None
        if host is not None:
            host.close()

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
