"""The ``vllm_ray`` backend: ``rollout.replicas`` vLLM engines, each in its own Ray actor.

Placement. On GPU each engine takes ``tensor_parallel_size`` GPUs: one GPU is the actor's own resource when the engine
has one rank; a wider engine gets a placement group of one GPU bundle per rank and vLLM's Ray executor places its
workers in it. On CPU each actor holds ``cpu_threads`` CPUs (default: the cores split evenly): the engine runs inside
the actor process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), with ``OMP_NUM_THREADS`` set to that many threads (Ray would
set 1) and the process pinned to its own block of cores, so replicas do not pile onto one core.

Ray. An initialised Ray is used as it is; otherwise ``ray.init()`` starts a local cluster, or joins the cluster named by
``RAY_ADDRESS``. ``close()`` shuts every engine down, kills the actors, removes the placement groups, and shuts Ray down
when this engine started it, so no vLLM or Ray process outlives the run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lightning_rl.errors import ConfigError
from lightning_rl.rollout.base import RolloutConfig, RolloutNotReadyError, Sampling
from lightning_rl.rollout.vllm import LLMHost, llm_kwargs, to_completions
from lightning_rl.rollout.worker_ext import BucketedWeightUpdates
from lightning_rl.types import Completion

log = logging.getLogger(__name__)

ACTOR_START_TIMEOUT_S = 900.0
CLOSE_TIMEOUT_S = 60.0


def _project_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def cpu_binding(replica: int, threads: int, num_cores: int) -> str:
    """The cores of replica ``replica`` ("0,1"): consecutive blocks of ``threads`` cores, wrapping around."""
    cores = sorted({(replica * threads + k) % num_cores for k in range(threads)})
    return ",".join(str(c) for c in cores)


def split_evenly(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges of ``n`` items over ``parts`` parts, sizes differing by at most one."""
    base, extra = divmod(n, parts)
    ranges, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        ranges.append((start, end))
        start = end
    return ranges


class RayVLLMEngine(BucketedWeightUpdates):
    """``rollout.replicas`` engines as Ray actors; generation splits the prompts across them (prompt-major order)."""

    def __init__(self, config: RolloutConfig, model_path: str, *, version: int = 0) -> None:
        import ray

        self.config = config
        self.transport = config.weight_sync_transport or "bytes"
        self.version = version
        self.ready = config.load_format != "dummy"
        self.num_replicas = config.replicas
        self.actors: list[Any] = []
        self._placement_groups: list[Any] = []
        self._started_ray = False
        self._lrl_nccl_sender: Any = None
        num_cores = os.cpu_count() or 1
        threads = config.cpu_threads or max(1, num_cores // config.replicas)
        if not ray.is_initialized():
            init: dict[str, Any] = {"include_dashboard": False, "configure_logging": False}
            if not os.environ.get("RAY_ADDRESS"):
                # A local cluster: declare enough logical CPUs for the actors even where that oversubscribes the host.
                init["num_cpus"] = max(num_cores, threads * config.replicas)
            ray.init(**init)
            self._started_ray = True
        try:
            self.on_gpu = ray.cluster_resources().get("GPU", 0) > 0
            if self.transport == "nccl" and not self.on_gpu:
                raise ConfigError("rollout.weight_sync_transport=nccl needs GPUs in the Ray cluster; this one has none")
            self._start_actors(model_path, threads, num_cores)
            info = ray.get(self.actors[0].info.remote(), timeout=ACTOR_START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        self.vocab_size: int = info["vocab_size"]
        self.weight_dtype: torch.dtype = info["dtype"]

    def _start_actors(self, model_path: str, threads: int, num_cores: int) -> None:
        import ray

        host_cls = ray.remote(LLMHost)
        pythonpath = os.pathsep.join(p for p in (_project_root(), os.environ.get("PYTHONPATH", "")) if p)
        for i in range(self.num_replicas):
            kwargs = llm_kwargs(self.config, model_path, replica=i, on_gpu=self.on_gpu)
            # Every weight reload logs INFO lines (and, for a tied LM head, a harmless "Failed to load weights"
            # warning); keep the engine quiet unless the user asked for vLLM's logs.
            env = {"PYTHONPATH": pythonpath, "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR")}
            options: dict[str, Any] = {"max_concurrency": 1}
            if self.on_gpu:
                options.update(self._gpu_options(kwargs))
            else:
                # The whole engine runs inside the actor process (no engine-core or worker subprocess): one process per
                # replica to start, to pin to its cores, and to kill. OMP_NUM_THREADS is read at process start.
                env.update(OMP_NUM_THREADS=str(threads), VLLM_ENABLE_V1_MULTIPROCESSING="0")
                env["LIGHTNING_RL_CPU_AFFINITY"] = cpu_binding(i, threads, num_cores)
                options.update(num_cpus=threads)
            options["runtime_env"] = {"env_vars": env}
            self.actors.append(host_cls.options(**options).remote(kwargs))
        # Engines start concurrently; wait for every one (a failed start raises here, naming the actor's error).
        ray.get([a.ping.remote() for a in self.actors], timeout=ACTOR_START_TIMEOUT_S)

    def _gpu_options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        tp = self.config.tensor_parallel_size
        if tp == 1:
            return {"num_gpus": 1, "num_cpus": 1}
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pg = placement_group([{"GPU": 1, "CPU": 1}] * tp, strategy="STRICT_PACK")
        self._placement_groups.append(pg)
        import ray

        ray.get(pg.ready(), timeout=ACTOR_START_TIMEOUT_S)
        kwargs["distributed_executor_backend"] = "ray"
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_capture_child_tasks=True)
        return {"num_gpus": 0, "num_cpus": 0, "scheduling_strategy": strategy}

    def _check_ready(self) -> None:
        if not self.ready:
            raise RolloutNotReadyError(
                "rollout.load_format=dummy: the engines hold random weights and refuse to generate until the first "
                "weight sync commits (call lightning_rl.weight_sync.sync first)"
            )

    def _live_actors(self) -> list[Any]:
        if not self.actors:
            raise RuntimeError("the Ray rollout engines are closed")
        return self.actors

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: Sampling) -> list[Completion]:
        import ray

        self._check_ready()
        actors = self._live_actors()
        prompts = [list(p) for p in prompt_token_ids]
        futures = [
            actor.generate.remote(prompts[start:end], sampling, start)
            for actor, (start, end) in zip(actors, split_evenly(len(prompts), len(actors)), strict=True)
            if end > start
        ]
        samples = [s for chunk in ray.get(futures) for s in chunk]
        return to_completions(samples, prompts, self.version)

    # ----- weight sync target (used by lightning_rl.weight_sync.sync) -------------------------------------------------
    def begin_weight_update(self) -> None:
        import ray

        ray.get([a.begin_update.remote() for a in self._live_actors()])

    def load_weight_bucket(self, payload: bytes) -> None:
        import ray

        ref = ray.put(payload)  # one copy in the object store, read by every replica
        ray.get([a.load_bucket.remote(ref) for a in self._live_actors()])

    def finish_weight_update(self, version: int) -> list[list[dict[str, Any]]]:
        import ray

        results = ray.get([a.finish_update.remote() for a in self._live_actors()])
        self.version = version
        self.ready = True
        return results

    def probe_logprobs(self, prompts: Sequence[Sequence[int]]) -> list[list[list[float]]]:
        import ray

        plain = [list(p) for p in prompts]
        return ray.get([a.prompt_logprobs.remote(plain) for a in self._live_actors()])

    def sleep(self) -> None:
        """Inert: Ray-hosted engines do not share the trainer's devices (colocated_offload applies in-process)."""

    def wake_up(self) -> None:
        """Inert, see ``sleep``."""

    def close(self) -> None:
        """Shut every engine down, kill the actors, remove placement groups, stop Ray if this engine started it."""
        import ray

        sender, self._lrl_nccl_sender = self._lrl_nccl_sender, None
        if sender is not None:
            sender.close()
        actors, self.actors = self.actors, []
        if ray.is_initialized():
            if actors:
                pending = [a.close.remote() for a in actors]
                try:
                    ray.get(pending, timeout=CLOSE_TIMEOUT_S)
                except Exception as err:  # a dead actor has nothing left to close
                    log.warning("rollout: closing a vLLM actor failed (%s); killing it", err)
            for actor in actors:
                ray.kill(actor, no_restart=True)
            from ray.util.placement_group import remove_placement_group

            for pg in self._placement_groups:
                remove_placement_group(pg)
        self._placement_groups = []
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self._started_ray = False

    def __enter__(self) -> RayVLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
