"""FSDP2 through Lightning's ModelParallelStrategy, with the mesh laid out for pure data-parallel sharding.

Lightning's defaults give one data-parallel replica per node and spend the rest of the processes on tensor parallelism;
lightning_rl's roles shard with ``fully_shard`` over every process instead. The same strategy runs one process (a mesh
of
size 1) and several (gloo on CPU, NCCL on GPU), so single-process runs take the same code path.
"""

from __future__ import annotations

from datetime import timedelta

from lightning.pytorch.strategies import ModelParallelStrategy


class FSDP2Strategy(ModelParallelStrategy):
    """Shard every role over all processes: data_parallel_size = world size, tensor_parallel_size = 1."""

    def __init__(self, timeout_minutes: float = 30.0) -> None:
        super().__init__(
            data_parallel_size="auto",
            tensor_parallel_size=1,
            save_distributed_checkpoint=True,
            timeout=timedelta(minutes=timeout_minutes),
        )

    def setup_environment(self) -> None:
        # "auto" would mean one replica per node; here every process is a data-parallel shard.
        self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()
