"""Chapter 4: distributed data-parallel training (DDP) on CPUs (gloo) and GPUs (nccl).

Modules: ``process_group`` (join/leave the group ``torchrun`` describes, small collectives),
``samplers`` (resumable and exact-once distributed samplers), ``hooks`` (a counting
all-reduce hook), ``launch`` (start ``torchrun`` as a subprocess), ``snapshot`` (atomic,
validated training snapshots), ``run_log``, ``config`` (``TrainConfig``), ``trainer`` (the
trainer's steps, ``run_training``), ``debugging`` (every rank's stack dump, the rank that
hangs), and the entry points ``train`` (``python -m common.ddp.train``), ``bench``,
``collectives_demo``, ``uneven``, ``first_step`` and ``examples_main`` (pytorch/examples'
launch, which ``first_step`` times), ``store_join`` (the wait in ``init_process_group`` with each
rendezvous store; its ranks run ``store_join_rank``), which no module imports. Imports go one way: ``common.ddp`` uses the core of ``common``.
"""

from __future__ import annotations

from common.lazy import lazy_names

#: Where each name lives: imported on first use (PEP 562), so that a program that needs none of
#: them (``python -m common.ddp.preflight``, which checks a node before torch is ever imported)
#: starts without importing torch.
_WHERE = {
    "AllReduceCounter": "common.ddp.hooks",
    "DistInfo": "common.ddp.process_group",
    "RESTART_SAFE_ENV": "common.ddp.launch",
    "ResumableDistributedSampler": "common.ddp.samplers",
    "ShardSampler": "common.ddp.samplers",
    "all_reduce_sum": "common.ddp.process_group",
    "cleanup_distributed": "common.ddp.process_group",
    "counting_allreduce_hook": "common.ddp.hooks",
    "free_port": "common.ddp.launch",
    "gather_objects": "common.ddp.process_group",
    "is_main_process": "common.ddp.process_group",
    "launch_env": "common.ddp.launch",
    "restart_hazard": "common.ddp.launch",
    "restart_safe_environment": "common.ddp.launch",
    "run_command": "common.ddp.launch",
    "setup_distributed": "common.ddp.process_group",
    "torchrun_command": "common.ddp.launch",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
