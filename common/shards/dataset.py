"""A streaming ``ShardedImageDataset`` over tar shards, and how it splits them.

The shard format (writer, manifest, safe reader) lives in ``common.shards.format``.

Splitting: the (seeded, per-epoch) shard order is dealt out by rank first, then by
DataLoader worker: consumer ``(rank, worker)`` reads ``order[rank::world_size][worker::W]``.
Every shard is read by exactly one consumer, so every sample is seen exactly once.

Decoding: with a ``transforms.v2`` transform (which takes uint8 tensors) JPEG members are
decoded by ``torchvision.io.decode_jpeg`` straight to uint8 ``(3, H, W)`` — pair it with
uint8 geometry (``v2.Resize``, ``v2.CenterCrop``) and normalize the batch last
(``common.fast.NormalizedLoader``). Other formats go through PIL and ``pil_to_tensor``.
The guide's classic transforms (and ``transform=None``) get PIL images, as before.

Resuming mid-epoch (``state_dict``/``load_state_dict``): the order of an epoch is a function of
the seed, the epoch and the plan it started with (ranks, DataLoader workers, batch size), so the
samples each rank has consumed are a prefix of that rank's sequence, one count per rank. A
resumed epoch reads only what is left, by its place in its shard (a tar index of headers), on
any number of ranks and workers: every sample exactly once, in the uninterrupted order when the
global batch is the same (``resume_batches``).
"""

from __future__ import annotations

import io
import itertools
import os
import tarfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info
from torchvision.transforms import v2
from torchvision.transforms.functional import pil_to_tensor

from common.data import decode_errors, open_image
from common.fast.pipeline import decode_tensor
from common.shards.format import (
    ShardError,
    ShardInfo,
    ShardRecord,
    decode_image,
    read_manifest,
    read_shard,
    sample_records,
    verify_shards,
)
from common.shards.keys import check_unique_keys
from common.shards.order import (
    batch_steps,
    equalized,
    resume_batches,
    round_robin,
    shuffle_buffered,
    shuffled_positions,
    split_shards,
    unique_keys,
    worker_quotas,
)

if TYPE_CHECKING:
    import pandas

#: The most image bytes one consumer's shuffle buffer may hold (``max_buffer_bytes``).
MAX_BUFFER_BYTES = 512 * 2**20
DECODES = ("auto", "pil", "uint8")


def decode_uint8(record: ShardRecord, *, max_pixels: int | None = None) -> torch.Tensor:
    """A record's image as uint8 RGB ``(3, H, W)``: ``decode_jpeg`` for JPEG, else PIL.

    The header's size is checked against ``max_pixels`` (``common.data.check_pixels``)
    before any pixel is decoded, as on the PIL path.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    if record.member.endswith(".jpg"):
        with decode_errors(f"shard {record.shard}: member {record.member}: cannot decode image",
                           ShardError):
            with open_image(io.BytesIO(record.data), max_pixels=max_pixels):
                pass  # the header only: a decompression bomb is refused before decoding
            # bytearray: torch.frombuffer needs a writable buffer (a 30 kB copy, negligible)
            return decode_tensor(torch.frombuffer(bytearray(record.data), dtype=torch.uint8),
                                 jpeg=True)
    return pil_to_tensor(decode_image(record, max_pixels=max_pixels))


def uses_uint8(decode: str, transform: Callable | None) -> bool:
    """Whether ``ShardedImageDataset`` hands ``transform`` uint8 tensors (else PIL images).

    ``"auto"``: tensors for a ``transforms.v2`` transform (they accept both), PIL for the
    guide's classic transforms and for ``None``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    if decode not in DECODES:
        raise ValueError(f"decode must be one of {DECODES}, got {decode!r}")
    return decode == "uint8" or (decode == "auto" and isinstance(transform, v2.Transform))


# ---------------------------------------------------------------- planning


def _tar_index(path: os.PathLike) -> list[list[tarfile.TarInfo]]:
    # The members of each sample, in stored order, from the headers only (seeks over the data).
    samples: list[list[tarfile.TarInfo]] = []
    key = None
    with tarfile.open(path, mode="r:") as tar:
        for member in tar:
            folder, _slash, name = member.name.rpartition("/")
            sample_key = (folder, name.partition(".")[0])
            if sample_key != key:
                samples.append([])
                key = sample_key
            samples[-1].append(member)
    return samples


# ---------------------------------------------------------------- the dataset


class ShardedImageDataset(IterableDataset):
    """Stream ``(image, label)`` from tar shards, split by rank, then by DataLoader worker.

    Each epoch: the shard order is permuted with ``(seed, epoch)`` (the same on every
    rank), dealt out by ``split_shards``, and each consumer streams its shards through a
    bounded shuffle buffer. ``equalize`` makes every rank yield the same number of samples
    per worker (``worker_quotas``), hence the same number of batches, so DDP never waits
    forever for a rank that ran out: ``"pad"`` repeats a few samples, ``"drop"`` leaves a
    few out (different ones each epoch), ``"none"`` yields every sample exactly once (for
    evaluation or one process). ``plan(num_workers)`` shows the counts.

    Call ``set_epoch(epoch)`` before each epoch. The epoch lives in a one-element tensor in
    shared memory, so persistent workers (``persistent_workers=True``) see the new epoch
    when the next epoch's iteration starts, under fork and spawn alike.

    Args:
        shards: ``ShardInfo`` list, or a manifest path / folder (see ``read_manifest``).
        transform: Applied to the PIL image (the same presets as the map-style datasets).
        target_transform: Applied to the integer label.
        shuffle: Permute the shard order and use the shuffle buffer.
        buffer_size: Samples held by each consumer's shuffle buffer (<= 1: no buffer).
        seed: Base seed; shard order and buffer depend on ``(seed, epoch, rank, worker)``.
        rank: This process's rank (default: from ``torch.distributed``, else 0).
        world_size: Number of ranks (default: from ``torch.distributed``, else 1).
        equalize: ``"pad"`` (default), ``"drop"`` or ``"none"``. ``"none"`` is refused while
            a process group of more than one rank is initialized and ``world_size > 1``:
            ranks would yield different numbers of batches and DDP would wait forever.
        verify: Check now every shard's sha256 against the manifest, and that no sample key
            is in two shards (``check_unique_keys``: tar headers only).
        allow_duplicate_keys: Accept a key in several shards (oversampling on purpose): the
            key check above and the reader's are skipped, and such samples are read twice.
        allow_uneven: Accept ``equalize="none"`` under such a process group anyway (for
            evaluation that runs no collective per batch).
        max_buffer_bytes: The most image bytes the shuffle buffer may hold (default
            ``MAX_BUFFER_BYTES``, 512 MiB per consumer); more is a ``ShardError``.
        max_pixels: Refuse larger images (default ``PIL.Image.MAX_IMAGE_PIXELS``).
        decode: ``"auto"`` (default; see :func:`uses_uint8`), ``"pil"`` or ``"uint8"``.
        seeded: Run ``transform`` under a seed of its own per sample, ``(seed, epoch, shard,
            key)`` (as ``common.ddp.data.SeededAugment``): a sample's augmentation then
            depends on no worker, rank or resume (a padded repeat gets the same one).
        batch_size: The DataLoader's batch size, needed to resume mid-epoch (``state_dict``):
            the loader takes one batch from each worker in turn, so the order of a rank's
            samples depends on it. The loader must keep ``drop_last=False``.

    Resuming: ``state_dict(batches, num_workers=...)`` after ``batches`` batches of this
    rank's loader, saved with the checkpoint; ``load_state_dict(state)`` on a new dataset, before
    its DataLoader starts iterating, with any number of ranks and workers. The rest of that
    epoch is read by each sample's place in its shard (nothing consumed is read or decoded).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    def __init__(self, shards: Sequence[ShardInfo] | str | os.PathLike,
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 *, shuffle: bool = True, buffer_size: int = 256, seed: int = 0,
                 rank: int | None = None, world_size: int | None = None,
                 equalize: str = "pad", verify: bool = True, allow_uneven: bool = False,
                 max_buffer_bytes: int = MAX_BUFFER_BYTES, max_pixels: int | None = None,
                 decode: str = "auto", allow_duplicate_keys: bool = False,
                 batch_size: int | None = None, seeded: bool = False) -> None:
        super().__init__()
        self.shards = read_manifest(shards) if isinstance(shards, (str, os.PathLike)) \
            else list(shards)
        distributed = dist.is_available() and dist.is_initialized()
        self.world_size = world_size if world_size is not None else (
            dist.get_world_size() if distributed else 1)
        self.rank = rank if rank is not None else (dist.get_rank() if distributed else 0)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside 0..{self.world_size - 1}")
        if len(self.shards) < self.world_size:
            raise ValueError(f"{len(self.shards)} shards cannot feed {self.world_size} ranks; "
                             "write smaller shards")
        worker_quotas(np.zeros((1, 1), dtype=np.int64), equalize)  # validates the name
        group_size = dist.get_world_size() if distributed else 1
        if equalize == "none" and self.world_size > 1 and group_size > 1 and not allow_uneven:
            raise ValueError(f"equalize='none' with a process group of {group_size} ranks: "
                             "ranks can yield different numbers of batches and DDP then waits "
                             "forever for the one that ran out; use equalize='pad' or 'drop' "
                             "(or allow_uneven=True for evaluation without per-batch "
                             "collectives)")
        self.max_buffer_bytes, self.max_pixels = max_buffer_bytes, max_pixels
        self.transform, self.target_transform = transform, target_transform
        self.shuffle, self.buffer_size, self.seed = shuffle, buffer_size, seed
        self.equalize, self.allow_duplicate_keys = equalize, allow_duplicate_keys
        self.uint8 = uses_uint8(decode, transform)
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.batch_size, self.seeded = batch_size, seeded
        self._resume: dict | None = None
        self._indexes: dict[int, list[list[tarfile.TarInfo]]] = {}
        if verify:
            verify_shards(self.shards)
            if not allow_duplicate_keys:
                check_unique_keys(self.shards)

    @property
    def epoch(self) -> int:
        """The epoch whose shard order and shuffle are used (shared with every worker)."""
        return int(self._epoch[0])

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose shard order and shuffle to use next."""
        self._epoch[0] = epoch

    def shard_order(self, epoch: int) -> list[int]:
        """The shard order of ``epoch``: a seeded permutation, or 0..N-1 without shuffle."""
        if not self.shuffle:
            return list(range(len(self.shards)))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.shards)).tolist()

    def _split(self, num_workers: int, epoch: int,
               world_size: int | None = None) -> tuple[list, np.ndarray, np.ndarray]:
        assignment = split_shards(self.shard_order(epoch), world_size=world_size or self.world_size,
                                  num_workers=num_workers)
        counts = np.array([[sum(self.shards[i].num_samples for i in shard_list)
                            for shard_list in per_rank] for per_rank in assignment])
        return assignment, counts, worker_quotas(counts, self.equalize)

    def plan(self, num_workers: int, *, epoch: int | None = None) -> pandas.DataFrame:
        """Who reads which shards in an epoch, for every rank: one row per consumer.

        Columns: rank, worker, shards, samples (in those shards), yields (after
        ``equalize``), padded, dropped.
        """
        import pandas as pd  # here only: a training rank never plans, and pandas is about 0.3 s to import

        epoch = self.epoch if epoch is None else epoch
        assignment, counts, quotas = self._split(num_workers, epoch)
        rows = [{"rank": r, "worker": w, "shards": [self.shards[i].path.name for i in shards],
                 "samples": int(counts[r, w]), "yields": int(quotas[r, w]),
                 "padded": int(max(quotas[r, w] - counts[r, w], 0)),
                 "dropped": int(max(counts[r, w] - quotas[r, w], 0))}
                for r, per_rank in enumerate(assignment) for w, shards in enumerate(per_rank)]
        return pd.DataFrame(rows)

    def samples_per_rank(self, num_workers: int, *, epoch: int | None = None) -> int:
        """How many samples this rank yields in an epoch (the same on every rank unless
        ``equalize="none"``)."""
        epoch = self.epoch if epoch is None else epoch
        return int(self._split(num_workers, epoch)[2][self.rank].sum())

    def records(self, *, worker: int = 0, num_workers: int = 0) -> Iterator[ShardRecord]:
        """The undecoded records one consumer yields this epoch, in order (no decoding)."""
        assignment, counts, quotas = self._split(num_workers, self.epoch)
        mine = assignment[self.rank][worker]
        stream = itertools.chain.from_iterable(
            read_shard(self.shards[i].path, expected=self.shards[i].num_samples,
                       num_classes=self.shards[i].num_classes) for i in mine)
        if not self.allow_duplicate_keys:
            stream = unique_keys(stream)  # for verify=False: the first key of each shard
        if self.shuffle and self.buffer_size > 1:
            rng = np.random.default_rng([self.seed, self.epoch, self.rank, worker])
            stream = shuffle_buffered(stream, self.buffer_size, rng, self.max_buffer_bytes)
        return equalized(stream, int(quotas[self.rank, worker]), int(counts[self.rank, worker]))

    # ------------------------------------------------------------ resuming

    def stream_positions(self, rank: int, worker: int, *, epoch: int, world_size: int,
                         num_workers: int) -> list[tuple[int, int]]:
        """What consumer ``(rank, worker)`` yields in ``epoch``, as ``(shard index, sample
        index in the shard)``: ``records()``'s order, computed without reading a shard."""
        assignment, counts, quotas = self._split(num_workers, epoch, world_size)
        stream = [(i, m) for i in assignment[rank][worker] for m in range(self.shards[i].num_samples)]
        if self.shuffle and self.buffer_size > 1:
            rng = np.random.default_rng([self.seed, epoch, rank, worker])
            stream = [stream[p] for p in shuffled_positions(len(stream), self.buffer_size, rng)]
        quota, count = int(quotas[rank, worker]), int(counts[rank, worker])
        kept = stream[:max(quota - count, 0)]  # "pad" repeats the first ones, cyclically
        return stream[:quota] + [kept[k % len(kept)] for k in range(quota - count)] if kept \
            else stream[:quota]

    def rank_sequence(self, rank: int, *, epoch: int, world_size: int, num_workers: int,
                      batch_size: int) -> list[list[tuple[int, int]]]:
        """The batches rank ``rank``'s DataLoader yields in ``epoch`` (``round_robin`` over its
        workers' streams), as ``(shard index, sample index)``."""
        streams = [self.stream_positions(rank, w, epoch=epoch, world_size=world_size,
                                         num_workers=num_workers)
                   for w in range(max(num_workers, 1))]
        return round_robin(streams, batch_size)

    def _resumed(self) -> tuple[dict, list[list[tuple[int, int]]], list[list[list]]] | None:
        # (state, each old rank's sequence, this epoch's resumed plan) while resuming this epoch.
        state = self._resume
        if state is None or state["epoch"] != self.epoch:
            return None
        batches = [self.rank_sequence(r, epoch=state["epoch"], world_size=state["world_size"],
                                      num_workers=state["num_workers"],
                                      batch_size=state["batch_size"])
                   for r in range(state["world_size"])]
        sequences = [[sample for batch in rank_batches for sample in batch]
                     for rank_batches in batches]
        same = self.world_size * self._need_batch_size() == state["world_size"] * state["batch_size"]
        sizes = [[len(batch) for batch in rank_batches] for rank_batches in batches] if same \
            else None
        plan = resume_batches(sequences, state["consumed"], world_size=self.world_size,
                              batch_size=self.batch_size, sizes=sizes)
        return state, (sequences, sizes), plan

    def _need_batch_size(self) -> int:
        if not self.batch_size:
            raise ValueError("ShardedImageDataset(batch_size=...) is needed to resume mid-epoch: "
                             "the DataLoader's batch size sets the order of the samples")
        return self.batch_size

    def state_dict(self, batches: int, *, num_workers: int) -> dict:
        """Where this epoch stands after every rank's loader yielded ``batches`` batches.

        ``{"epoch", "world_size", "num_workers", "batch_size", "consumed"}``: the plan the
        epoch started with and how many samples of each of its ranks' sequences are consumed
        (plain integers: save it as JSON or inside a checkpoint).
        """
        resumed = self._resumed()
        if resumed is not None:
            state, (sequences, sizes), _plan = resumed
            global_batch = self.world_size * self._need_batch_size()
            steps = itertools.islice(batch_steps(sequences, state["consumed"], global_batch, sizes),
                                     batches)
            consumed = next(itertools.chain(reversed(list(steps)), [(None, state["consumed"])]))[1]
            return {**state, "consumed": consumed}
        batch_size = self._need_batch_size()
        consumed = [sum(len(batch) for batch in self.rank_sequence(
            r, epoch=self.epoch, world_size=self.world_size, num_workers=num_workers,
            batch_size=batch_size)[:batches]) for r in range(self.world_size)]
        return {"epoch": self.epoch, "world_size": self.world_size, "num_workers": num_workers,
                "batch_size": batch_size, "consumed": consumed}

    def load_state_dict(self, state: dict) -> None:
        """Resume ``state["epoch"]`` where ``state`` says (sets the epoch too)."""
        keys = {"epoch", "world_size", "num_workers", "batch_size", "consumed"}
        if set(state) != keys or len(state["consumed"]) != state["world_size"]:
            raise ValueError(f"not a ShardedImageDataset state: {sorted(state)}, expected "
                             f"{sorted(keys)} with one count per rank")
        self._need_batch_size()
        self._resume = {key: state[key] for key in keys}
        self._resume["consumed"] = [int(n) for n in state["consumed"]]
        self.set_epoch(int(state["epoch"]))

    def _index(self, shard: int) -> list[list[tarfile.TarInfo]]:
        if shard not in self._indexes:
            info = self.shards[shard]
            index = _tar_index(info.path)
            if len(index) != info.num_samples:
                raise ShardError(f"shard {info.path}: holds {len(index)} samples but the "
                                 f"manifest says {info.num_samples}")
            self._indexes[shard] = index
        return self._indexes[shard]

    def read_sample(self, shard: int, position: int) -> ShardRecord:
        """Sample ``position`` of shard ``shard`` (undecoded), read by its offset in the tar."""
        info = self.shards[shard]
        members = self._index(shard)[position]
        with open(info.path, "rb") as handle:
            data = []
            for member in members:
                handle.seek(member.offset_data)
                data.append((member, handle.read(member.size)))
        return next(sample_records(info.path, iter(data), info.num_classes))

    def _resumed_records(self, plan: list[list], worker: int,
                         num_workers: int) -> Iterator[ShardRecord]:
        workers = max(num_workers, 1)
        for batch in plan[self.rank][worker::workers]:
            for shard, position in batch:
                yield self.read_sample(shard, position)

    def _decode(self, record: ShardRecord):
        return (decode_uint8(record, max_pixels=self.max_pixels) if self.uint8
                else decode_image(record, max_pixels=self.max_pixels))

    def planned_loader(self, *, num_workers: int = 0, collate_fn: Callable | None = None,
                       **options) -> DataLoader:
        """A DataLoader of ``batch_size`` batches that keeps a resumed epoch's batches as
        planned: a plain DataLoader cuts each worker's samples anew, so a short batch in the
        middle of a resumed epoch (the last of a worker before the stop) would shift the
        batches after it. Outside a resumed epoch it is the plain DataLoader."""
        if self._resumed() is None:
            return DataLoader(self, batch_size=self._need_batch_size(), num_workers=num_workers,
                              collate_fn=collate_fn, **options)
        return DataLoader(_PlannedBatches(self, collate_fn or default_collate), batch_size=None,
                          num_workers=num_workers, **options)

    def sample(self, record: ShardRecord):
        """``(image, label)`` of one record: decoded, then transformed."""
        image = self._decode(record)
        label = record.label
        if self.transform and self.seeded:
            seed = np.random.SeedSequence([self.seed, self.epoch, zlib.crc32(
                f"{record.shard}/{record.key}".encode())]).generate_state(1)[0]
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(int(seed))
                image = self.transform(image)
        elif self.transform:
            image = self.transform(image)
        if self.target_transform:
            label = self.target_transform(label)
        return image, label

    def __iter__(self):
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 0)
        resumed = self._resumed()
        records = (self._resumed_records(resumed[2], worker, num_workers) if resumed
                   else self.records(worker=worker, num_workers=num_workers))
        for record in records:
            yield self.sample(record)


class _PlannedBatches(IterableDataset):
    # A resumed epoch's planned batches of this rank, collated, dealt out to the workers in turn.
    def __init__(self, dataset: ShardedImageDataset, collate_fn: Callable) -> None:
        super().__init__()
        self.dataset, self.collate_fn = dataset, collate_fn

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        plan = self.dataset._resumed()[2][self.dataset.rank]
        for batch in plan[worker::workers]:
            yield self.collate_fn([self.dataset.sample(self.dataset.read_sample(shard, position))
                                   for shard, position in batch])
