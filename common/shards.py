"""Tar shards in the WebDataset convention, and a streaming ``ShardedImageDataset`` over them.

A shard is a plain tar file holding, per sample, ``<key>.jpg`` (the original image bytes,
never re-encoded) and ``<key>.cls`` (the integer label as ASCII text), members of one
sample adjacent. ``manifest.json`` next to the shards lists every shard with its sample
count and sha256, so each rank can plan its epoch without reading any shard.

Splitting: the (seeded, per-epoch) shard order is dealt out by rank first, then by
DataLoader worker: consumer ``(rank, worker)`` reads ``order[rank::world_size][worker::W]``.
Every shard is read by exactly one consumer, so every sample is seen exactly once.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd
import torch.distributed as dist
from PIL import Image, UnidentifiedImageError
from torch.utils.data import IterableDataset, get_worker_info

from common.data import BadSampleError

MANIFEST_NAME = "manifest.json"
IMAGE_EXTENSIONS = {".jpg": "jpg", ".jpeg": "jpg", ".png": "png"}
POLICIES = ("pad", "drop", "none")
MAX_MEMBER_BYTES = 256 * 2**20  # refuse to buffer a member larger than this


class ShardError(BadSampleError):
    """A shard (or one of its members) is missing, corrupt, unsafe or disagrees with the manifest.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """


@dataclass(frozen=True)
class ShardInfo:
    """One shard file: its path, how many samples it holds, and its sha256 (if known).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    path: Path
    num_samples: int
    sha256: str | None = None


# ---------------------------------------------------------------- writing


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    # Fixed metadata so the same input gives byte-identical shards on any machine.
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.type = size, 0, 0o644, tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_one(path: Path, samples: Sequence[tuple[str, Path, int]], source) -> None:
    partial = path.with_suffix(".tar.partial")
    with tarfile.open(partial, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, image_path, label in samples:
            extension = IMAGE_EXTENSIONS.get(image_path.suffix.lower())
            if extension is None:
                raise BadSampleError(f"{image_path}: only {sorted(IMAGE_EXTENSIONS)} images "
                                     "can be sharded")
            for name, data in ((f"{key}.{extension}", image_path.read_bytes()),
                               (f"{key}.cls", str(int(label)).encode("ascii"))):
                tar.addfile(_tarinfo(name, len(data)), io.BytesIO(data))
                source.update(data)
    partial.replace(path)  # a crash never leaves a half-written shard under the real name


def write_shards(samples: Sequence[tuple[str | os.PathLike, int]], out_dir: str | os.PathLike,
                 *, shard_size: int, prefix: str = "shard",
                 classes: Sequence[str] | None = None) -> Path:
    """Pack ``(image_path, label)`` pairs, in order, into tar shards plus ``manifest.json``.

    Sample ``i`` gets the key ``f"{i:08d}"``; every shard holds ``shard_size`` samples
    except possibly the last. Output is deterministic: same input, same bytes.

    Args:
        samples: Image files and integer labels (e.g. ``CustomImageDataset`` paths/labels).
        out_dir: Folder for ``<prefix>-000000.tar ...`` and the manifest (created).
        shard_size: Samples per shard.
        prefix: Shard file name prefix.
        classes: Class names stored in the manifest.

    Returns:
        The manifest path.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    if not samples:
        raise ValueError("no samples to shard")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    keyed = [(f"{i:08d}", Path(p), int(label)) for i, (p, label) in enumerate(samples)]
    entries, source = [], hashlib.sha256()
    for start in range(0, len(keyed), shard_size):
        path = out / f"{prefix}-{start // shard_size:06d}.tar"
        chunk = keyed[start:start + shard_size]
        _write_one(path, chunk, source)
        entries.append({"name": path.name, "num_samples": len(chunk),
                        "num_bytes": path.stat().st_size, "sha256": file_sha256(path)})
    manifest = {"format": "webdataset-tar", "version": 1, "shard_size": shard_size,
                "num_samples": len(keyed), "classes": list(classes or []), "shards": entries,
                "source_sha256": source.hexdigest()}  # of all image and label bytes, in order
    manifest_path = out / MANIFEST_NAME
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest_path


# ---------------------------------------------------------------- manifest


def read_manifest(path: str | os.PathLike) -> list[ShardInfo]:
    """The shards a manifest lists (``path`` is the JSON file or its folder), checked for sanity.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    path = Path(path)
    path = path / MANIFEST_NAME if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"shard manifest {path} does not exist (run "
                                "data_scripts/make_shards.py)")
    try:
        entries = json.loads(path.read_text())["shards"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ShardError(f"{path}: not a shard manifest ({error})") from error
    shards = []
    for i, entry in enumerate(entries):
        name, count = entry.get("name", ""), entry.get("num_samples")
        if PurePosixPath(name).name != name or name in ("", ".", ".."):
            raise ShardError(f"{path}: shard {i} name {name!r} must be a plain file name")
        if not isinstance(count, int) or count < 1:
            raise ShardError(f"{path}: shard {name} has num_samples {count!r}")
        shards.append(ShardInfo(path.parent / name, count, entry.get("sha256")))
    if not shards:
        raise ShardError(f"{path}: lists no shards")
    return shards


def verify_shards(shards: Iterable[ShardInfo]) -> None:
    """Check that every shard exists and matches its manifest sha256.

    Raises:
        ShardError: Naming the first missing shard or checksum mismatch.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    for shard in shards:
        if not shard.path.is_file():
            raise ShardError(f"shard {shard.path} is missing")
        if shard.sha256 is not None and file_sha256(shard.path) != shard.sha256:
            raise ShardError(f"shard {shard.path}: sha256 mismatch (manifest "
                             f"{shard.sha256[:12]}..., file {file_sha256(shard.path)[:12]}...); "
                             "the file is corrupt or was changed after the manifest was written")


def ensure_shards(samples: Sequence[tuple[str | os.PathLike, int]], out_dir: str | os.PathLike,
                  *, shard_size: int, prefix: str = "shard",
                  classes: Sequence[str] | None = None) -> Path:
    """``write_shards`` unless ``out_dir`` already holds verified shards of the same samples.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    manifest = Path(out_dir) / MANIFEST_NAME
    if manifest.is_file():
        shards, source = read_manifest(manifest), hashlib.sha256()
        for image_path, label in samples:
            source.update(Path(image_path).read_bytes() + str(int(label)).encode("ascii"))
        written = json.loads(manifest.read_text())
        if written.get("source_sha256") == source.hexdigest() and \
                written.get("shard_size") == shard_size:
            try:
                verify_shards(shards)
                return manifest
            except ShardError:
                pass  # damaged: fall through and rewrite every shard
    return write_shards(samples, out_dir, shard_size=shard_size, prefix=prefix, classes=classes)


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class ShardRecord:
    """One undecoded sample as read from a shard (image bytes stay encoded until needed).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    shard: str
    key: str
    member: str
    data: bytes
    label: int


def _check_member(shard: Path, member: tarfile.TarInfo) -> tuple[str, str]:
    # Nothing is ever extracted to disk, but a '../' or absolute name means a hostile or
    # broken shard, and its key could collide with a real one: refuse it.
    where = f"shard {shard}: member {member.name!r}"
    if not member.isreg():
        raise ShardError(f"{where} is not a regular file (links, folders and devices are refused)")
    posix = PurePosixPath(member.name)
    if posix.is_absolute() or ".." in posix.parts or "\\" in member.name:
        raise ShardError(f"{where} has an unsafe path (absolute or '..')")
    stem, dot, extension = posix.name.partition(".")
    if not dot or not stem:
        raise ShardError(f"{where} is not named <key>.<extension>")
    return str(posix.parent / stem), extension.lower()


def _parse_label(text: bytes, where: str) -> int:
    value = text.decode("ascii", errors="replace").strip()
    if not value.isdigit():
        raise ShardError(f"{where}: label {value!r} is not a non-negative integer")
    return int(value)


def _records(path: Path, members: Iterator[tuple[tarfile.TarInfo, bytes]]) -> Iterator[ShardRecord]:
    key, fields, seen = None, {}, set()
    for member, data in itertools.chain(members, [(None, b"")]):
        sample_key, extension = _check_member(path, member) if member else (None, "")
        if sample_key != key and key is not None:
            image = [e for e in fields if e in IMAGE_EXTENSIONS.values()]
            if len(image) != 1 or "cls" not in fields or len(fields) != 2:
                raise ShardError(f"shard {path}: sample {key!r} has members {sorted(fields)}, "
                                 "expected one image and one .cls")
            yield ShardRecord(path.name, key, f"{key}.{image[0]}", fields[image[0]],
                              _parse_label(fields["cls"], f"shard {path}: member {key}.cls"))
            seen.add(key)
            fields = {}
        if member is None:
            return
        if sample_key in seen or extension in fields:
            raise ShardError(f"shard {path}: member {member.name!r} repeats sample {sample_key!r}")
        key, fields[extension] = sample_key, data


def read_shard(path: str | os.PathLike, *, expected: int | None = None) -> Iterator[ShardRecord]:
    """Stream the samples of one shard in stored order, sequentially, without extracting.

    Args:
        path: The tar file.
        expected: If given, the shard must hold exactly this many samples.

    Raises:
        ShardError: Naming the shard and member, for a truncated or corrupt tar, an unsafe
            or non-regular member, an incomplete sample, or a wrong sample count.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    path = Path(path)
    last = "(the tar header)"

    def members() -> Iterator[tuple[tarfile.TarInfo, bytes]]:
        nonlocal last
        with tarfile.open(path, mode="r|") as tar:  # "r|": a forward-only stream
            for member in tar:
                last = member.name
                if member.size > MAX_MEMBER_BYTES:
                    raise tarfile.ReadError(f"member of {member.size} bytes (over the limit)")
                handle = tar.extractfile(member) if member.isreg() else None
                data = handle.read() if handle else b""
                if len(data) != (member.size if handle else 0):
                    # a stream-mode tarfile returns a short read here instead of failing
                    raise tarfile.ReadError(f"only {len(data)} of {member.size} bytes")
                yield member, data
            if path.stat().st_size < tar.offset + 2 * tarfile.BLOCKSIZE:
                # tarfile also stops quietly at a cut between members: check the zero trailer
                raise tarfile.ReadError("no end-of-archive marker after it; the file is cut")

    count = 0
    try:
        for record in _records(path, members()):
            count += 1
            yield record
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ShardError(f"shard {path}: cannot read member {last!r} (truncated or corrupt "
                         f"tar): {error}") from error
    if expected is not None and count != expected:
        raise ShardError(f"shard {path}: holds {count} samples but the manifest says "
                         f"{expected} (truncated?)")


def decode_image(record: ShardRecord) -> Image.Image:
    """Decode a record's image bytes fully as RGB, naming shard and member on failure.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    try:
        with Image.open(io.BytesIO(record.data)) as image:
            return image.convert("RGB")
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as error:
        raise ShardError(f"shard {record.shard}: member {record.member}: cannot decode "
                         f"image: {error}") from error


# ---------------------------------------------------------------- planning


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


def _shuffled(records: Iterator[ShardRecord], size: int,
              rng: np.random.Generator) -> Iterator[ShardRecord]:
    # A bounded buffer: memory holds `size` encoded samples, never the whole stream.
    buffer: list[ShardRecord] = []
    for record in records:
        if len(buffer) < size:
            buffer.append(record)
            continue
        index = int(rng.integers(size))
        yield buffer[index]
        buffer[index] = record
    rng.shuffle(buffer)
    yield from buffer


def _equalized(records: Iterator[ShardRecord], quota: int, count: int) -> Iterator[ShardRecord]:
    kept: list[ShardRecord] = []  # the first (quota - count) records, repeated to pad
    for record in itertools.islice(records, quota):
        if len(kept) < quota - count:
            kept.append(record)
        yield record
    if quota > count:
        yield from itertools.islice(itertools.cycle(kept), quota - count)


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

    Call ``set_epoch(epoch)`` before each epoch. With ``persistent_workers=True`` the
    workers keep the epoch they started with, so leave that off.

    Args:
        shards: ``ShardInfo`` list, or a manifest path / folder (see ``read_manifest``).
        transform: Applied to the PIL image (the same presets as the map-style datasets).
        target_transform: Applied to the integer label.
        shuffle: Permute the shard order and use the shuffle buffer.
        buffer_size: Samples held by each consumer's shuffle buffer (<= 1: no buffer).
        seed: Base seed; shard order and buffer depend on ``(seed, epoch, rank, worker)``.
        rank: This process's rank (default: from ``torch.distributed``, else 0).
        world_size: Number of ranks (default: from ``torch.distributed``, else 1).
        equalize: ``"pad"`` (default), ``"drop"`` or ``"none"``.
        verify: Check every shard's sha256 against the manifest now.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    def __init__(self, shards: Sequence[ShardInfo] | str | os.PathLike,
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 *, shuffle: bool = True, buffer_size: int = 256, seed: int = 0,
                 rank: int | None = None, world_size: int | None = None,
                 equalize: str = "pad", verify: bool = True) -> None:
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
        self.transform, self.target_transform = transform, target_transform
        self.shuffle, self.buffer_size, self.seed = shuffle, buffer_size, seed
        self.equalize, self.epoch = equalize, 0
        if verify:
            verify_shards(self.shards)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose shard order and shuffle to use next."""
        self.epoch = epoch

    def shard_order(self, epoch: int) -> list[int]:
        """The shard order of ``epoch``: a seeded permutation, or 0..N-1 without shuffle."""
        if not self.shuffle:
            return list(range(len(self.shards)))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.shards)).tolist()

    def _split(self, num_workers: int, epoch: int) -> tuple[list, np.ndarray, np.ndarray]:
        assignment = split_shards(self.shard_order(epoch), world_size=self.world_size,
                                  num_workers=num_workers)
        counts = np.array([[sum(self.shards[i].num_samples for i in shard_list)
                            for shard_list in per_rank] for per_rank in assignment])
        return assignment, counts, worker_quotas(counts, self.equalize)

    def plan(self, num_workers: int, *, epoch: int | None = None) -> pd.DataFrame:
        """Who reads which shards in an epoch, for every rank: one row per consumer.

        Columns: rank, worker, shards, samples (in those shards), yields (after
        ``equalize``), padded, dropped.
        """
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
            read_shard(self.shards[i].path, expected=self.shards[i].num_samples) for i in mine)
        if self.shuffle and self.buffer_size > 1:
            rng = np.random.default_rng([self.seed, self.epoch, self.rank, worker])
            stream = _shuffled(stream, self.buffer_size, rng)
        return _equalized(stream, int(quotas[self.rank, worker]), int(counts[self.rank, worker]))

    def __iter__(self):
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 0)
        for record in self.records(worker=worker, num_workers=num_workers):
            image, label = decode_image(record), record.label
            if self.transform:
                image = self.transform(image)
            if self.target_transform:
                label = self.target_transform(label)
            yield image, label
