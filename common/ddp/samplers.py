"""The samplers a DDP run needs: resumable training shards and exact-once evaluation shards."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from torch.utils.data import DistributedSampler, Sampler


class ShardSampler(Sampler[int]):
    """Rank ``r`` of ``world_size`` gets indices ``r, r + world_size, ...``, in order, no padding.

    ``DistributedSampler`` pads every rank to the same length by repeating samples, so a
    validation set of 13 images on 2 ranks would count one image twice. Evaluation needs
    no equal lengths (no collective runs per batch), so this sampler counts each sample
    exactly once: the per-rank counts sum to ``len(dataset)``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, dataset_size: int, *, rank: int, world_size: int) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must lie in 0..{world_size - 1}, got {rank}")
        self.indices = range(rank, dataset_size, world_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class ResumableDistributedSampler(DistributedSampler):
    """``DistributedSampler`` that can start an epoch part-way through (for resuming).

    ``set_epoch(epoch, start=k)`` skips this rank's first ``k`` indices of that epoch's
    shuffled order, so a run resumed from a mid-epoch snapshot sees exactly the samples
    the interrupted run had not yet seen, in the same order.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        super().set_epoch(epoch)
        if not 0 <= start <= self.num_samples:
            raise ValueError(f"start must lie in 0..{self.num_samples}, got {start}")
        self.start = start

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.start, None)

    def __len__(self) -> int:
        return self.num_samples - self.start
