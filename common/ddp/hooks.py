"""A DDP communication hook that counts gradient all-reduces (to show what ``no_sync`` saves)."""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


@dataclass
class AllReduceCounter:
    """State of ``counting_allreduce_hook``: how often DDP synchronised gradients.

    ``syncs`` counts completed gradient synchronisations (the last bucket of a backward
    pass); ``bucket_calls`` counts all-reduce calls (one per bucket).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    process_group: object = None
    syncs: int = 0
    bucket_calls: int = 0


# Unannotated on purpose: DDP compares the annotations with dist.GradBucket and Future, and
# ``from __future__ import annotations`` would turn them into strings that fail the check.
def counting_allreduce_hook(state, bucket):
    """A DDP communication hook: the default averaging all-reduce, counted.

    Register it with ``ddp_model.register_comm_hook(AllReduceCounter(), counting_allreduce_hook)``.
    Inside ``ddp_model.no_sync()`` DDP calls no hook at all, which is what makes gradient
    accumulation cheap.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    state.bucket_calls += 1
    if bucket.is_last():
        state.syncs += 1
    return default_hooks.allreduce_hook(state.process_group, bucket)
