"""The order of an epoch of tar shards, as integers: which shards each rank and DataLoader worker reads,
how a shuffle buffer permutes a stream, how workers' streams interleave into batches, and where a
resumed epoch goes on. ``ShardedImageDataset`` (``common.shards.dataset``) reads the shards in this
order; a resume replays it here without reading a shard.

Introduced in chapters/05_sharded_datasets.ipynb.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np

from common.shards.format import ShardError, ShardRecord

POLICIES = ("pad", "drop", "none")


def split_shards(order: Sequence[int], *, world_size: int,
                 num_workers: int) -> list[list[list[int]]]:
    """``plan[rank][worker]``: the shard indices each consumer reads, rank first, then worker.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    workers = max(num_workers, 1)
    return [[list(order[rank::world_size][w::workers]) for w in range(workers)]
            for rank in range(world_size)]


def worker_quotas(counts: np.ndarray, policy: str) -> np.ndarray:
    """How many samples each consumer yields, ``counts[rank, worker]`` -> same shape.

    ``"pad"`` and ``"drop"`` give worker ``w`` the same quota on every rank (the max,
    resp. min, over ranks), so every rank yields the same number of batches for any
    ``batch_size`` and ``drop_last``; ``"none"`` keeps the raw counts (exactly once).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if policy == "none":
        return counts.copy()
    target = counts.max(axis=0) if policy == "pad" else counts.min(axis=0)
    if policy == "pad" and ((counts == 0) & (target > 0)).any():
        rank, worker = np.argwhere((counts == 0) & (target > 0))[0]
        raise ValueError(f"rank {rank} worker {worker} gets no shard, so it cannot pad: use "
                         "at least world_size * num_workers shards, or policy='drop'")
    return np.broadcast_to(target, counts.shape).copy()


def shuffle_buffered(records: Iterator[ShardRecord], size: int, rng: np.random.Generator,
              max_bytes: int) -> Iterator[ShardRecord]:
    # A bounded buffer: memory holds `size` encoded samples, never the whole stream, and
    # at most `max_bytes` of them: a few huge members must not multiply by `size`.
    buffer: list[ShardRecord] = []
    held = 0
    for record in records:
        held += len(record.data)
        if held > max_bytes:
            raise ShardError(f"shard {record.shard}: member {record.member}: the shuffle buffer "
                             f"would hold {held:,} bytes in {len(buffer) + 1} samples, over "
                             f"max_buffer_bytes={max_bytes:,}; lower buffer_size or raise "
                             "max_buffer_bytes")
        if len(buffer) < size:
            buffer.append(record)
            continue
        index = int(rng.integers(size))
        yield buffer[index]
        held -= len(buffer[index].data)
        buffer[index] = record
    rng.shuffle(buffer)
    yield from buffer


def equalized(records: Iterator[ShardRecord], quota: int, count: int) -> Iterator[ShardRecord]:
    kept: list[ShardRecord] = []  # the first (quota - count) records, repeated to pad
    for record in itertools.islice(records, quota):
        if len(kept) < quota - count:
            kept.append(record)
        yield record
    for _unused in records:
        # Read (not decode) to the end, so each shard's count is checked against the manifest
        # even where "drop" leaves samples out or the last shard holds more than it says.
        pass
    if quota > count:
        yield from itertools.islice(itertools.cycle(kept), quota - count)


def unique_keys(records: Iterator[ShardRecord]) -> Iterator[ShardRecord]:
    # A shard copied (or re-packed) under another name starts with the same key as the
    # original: remember each shard's first key (memory per shard, not per sample).
    first_keys: dict[str, str] = {}
    current = None
    for record in records:
        if record.shard != current:
            current = record.shard
            shard = first_keys.setdefault(record.key, record.shard)
            if shard != record.shard:
                raise ShardError(f"shard {record.shard}: key {record.key!r} was already read "
                                 f"from shard {shard} (the same samples in two shards?)")
        yield record


# ---------------------------------------------------------------- resuming by offset


def shuffled_positions(count: int, size: int, rng: np.random.Generator) -> list[int]:
    """The stream positions ``0..count-1`` in the order the shuffle buffer yields them.

    The buffer's draws do not depend on the data, so this replays them on integers: the
    order of a whole epoch is known without reading a shard.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    if size <= 1:
        return list(range(count))
    buffer: list[int] = []
    out: list[int] = []
    for position in range(count):
        if len(buffer) < size:
            buffer.append(position)
            continue
        index = int(rng.integers(size))
        out.append(buffer[index])
        buffer[index] = position
    rng.shuffle(buffer)
    return out + buffer


def round_robin(streams: Sequence[Sequence], batch_size: int) -> list[list]:
    """The batches a DataLoader yields from its workers' ``streams``, in order.

    Each worker batches its own stream (the last batch may be short); the loader takes one
    batch from each worker in turn and skips a worker that has run out. One stream: no workers.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    per_worker = [[list(stream[i:i + batch_size]) for i in range(0, len(stream), batch_size)]
                  for stream in streams]
    rounds = max((len(batches) for batches in per_worker), default=0)
    return [batches[t] for t in range(rounds) for batches in per_worker if t < len(batches)]


def resume_batches(sequences: Sequence[Sequence], consumed: Sequence[int], *, world_size: int,
                   batch_size: int, sizes: Sequence[Sequence[int]] | None = None) -> list[list[list]]:
    """``plan[rank]``: the batches each rank of a resumed epoch yields, and what they consume.

    ``sequences[r]`` is what rank ``r`` of the interrupted plan yields in an epoch, in order;
    ``consumed[r]`` how many of them it had consumed. Every step takes the next
    ``world_size * batch_size`` samples, as evenly as possible from each old rank's rest in
    rank order, and deals them out in ``world_size`` consecutive parts: every sample once, and
    with the same global batch the samples of each step are the uninterrupted run's.
    ``sizes[r]``, the old rank's batch sizes, keeps its batches as they were (a short batch
    included) where the global batch is the same and the counts fall between batches; on as
    many ranks as before, each rank then gets its own old rank's batches.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    plan: list[list[list]] = [[] for _ in range(world_size)]
    for pieces, _position in batch_steps(sequences, consumed, world_size * batch_size, sizes):
        if len(pieces) == world_size and sizes is not None:
            parts = pieces
        else:
            chunk = [sample for piece in pieces for sample in piece]
            parts = [[chunk[k] for k in part]
                     for part in np.array_split(np.arange(len(chunk)), world_size)]
        for rank, part in enumerate(parts):
            if len(part):
                plan[rank].append(list(part))
    return plan


def batch_steps(sequences: Sequence[Sequence], consumed: Sequence[int], global_batch: int,
           sizes: Sequence[Sequence[int]] | None = None) -> Iterator[tuple[list, list[int]]]:
    # Each step's pieces (one per old rank), and how many of each old rank's sequence are
    # consumed after it. With ``sizes``: each old rank's next batch, as it was.
    base, extra = divmod(global_batch, len(sequences))
    takes = [base + (r < extra) for r in range(len(sequences))]
    position = list(consumed)
    following = None
    if sizes is not None:
        bounds = [list(itertools.accumulate(batch_sizes, initial=0)) for batch_sizes in sizes]
        if all(n in bound for n, bound in zip(consumed, bounds, strict=True)) and \
                all(len(b) == len(bounds[0]) for b in bounds):
            following = [bound.index(n) for n, bound in zip(consumed, bounds, strict=True)]
    while True:
        pieces = []
        for r, sequence in enumerate(sequences):
            if following is not None:
                t = following[r]
                take = sizes[r][t] if t < len(sizes[r]) else 0
                following[r] += 1
            else:
                take = takes[r]
            piece = list(sequence[position[r]:position[r] + take])
            position[r] += len(piece)
            pieces.append(piece)
        if not any(pieces):
            return
        yield pieces, list(position)
