"""Chapter 4: distributed data-parallel training (DDP) on CPUs (gloo) and GPUs (nccl).

Modules: ``process_group`` (join/leave the group ``torchrun`` describes, small collectives),
``samplers`` (resumable and exact-once distributed samplers), ``hooks`` (a counting
all-reduce hook), ``launch`` (start ``torchrun`` as a subprocess), ``snapshot`` (atomic,
validated training snapshots), ``run_log``, ``config`` (``TrainConfig``), ``trainer`` (the
trainer's steps, ``run_training``), ``debugging`` (every rank's stack dump, the rank that
hangs), and the entry points ``train`` (``python -m common.ddp.train``), ``bench``,
``collectives_demo``, ``uneven``, ``first_step`` and ``examples_main`` (pytorch/examples'
launch, which ``first_step`` times), which no module imports. Imports go one way: ``common.ddp`` uses the core of ``common``.
"""

from common.ddp.hooks import AllReduceCounter, counting_allreduce_hook
from common.ddp.launch import (
    RESTART_SAFE_ENV,
    free_port,
    launch_env,
    restart_hazard,
    run_command,
    torchrun_command,
)
from common.ddp.process_group import (
    DistInfo,
    all_reduce_sum,
    cleanup_distributed,
    gather_objects,
    is_main_process,
    setup_distributed,
)
from common.ddp.samplers import ResumableDistributedSampler, ShardSampler

__all__ = [
    "RESTART_SAFE_ENV",
    "AllReduceCounter",
    "DistInfo",
    "ResumableDistributedSampler",
    "ShardSampler",
    "all_reduce_sum",
    "cleanup_distributed",
    "counting_allreduce_hook",
    "free_port",
    "gather_objects",
    "is_main_process",
    "launch_env",
    "restart_hazard",
    "run_command",
    "setup_distributed",
    "torchrun_command",
]
