"""A streaming (``IterableDataset``) reader of the annotations CSV, split across workers.

A map-style ``Dataset`` hands out indices, so the sampler decides which worker loads
what. An ``IterableDataset`` has no indices: every worker runs ``__iter__`` on its own
copy, and unless ``__iter__`` keeps only its share (``get_worker_info()``), each of
``num_workers`` workers yields the whole stream and every sample appears
``num_workers`` times per epoch.
"""

from __future__ import annotations

import csv
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from common.annotations import decode_text
from common.data import BadSampleError, load_rgb, parse_label, resolve_inside


def shard_of(rank: int = 0, world_size: int = 1) -> tuple[int, int]:
    """This reader's (shard index, number of shards): one shard per (process, worker).

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """
    info = get_worker_info()
    worker_id, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank * num_workers + worker_id, world_size * num_workers


class CsvImageStream(IterableDataset):
    """Read ``file_name,label`` rows lazily and yield ``(image, label)``, one pass per epoch.

    Row ``i`` (0-based, after the header) goes to shard ``i % num_shards``, so across all
    workers (and ``world_size`` processes) every row is read exactly once. Rows are
    validated as they stream past, with the CSV line in the error; every reader checks every
    row's label (cheap: no image is opened), so a file listed twice with different labels is
    refused and one listed twice with the same label is reported (a warning, from shard 0);
    this keeps one small entry per distinct file name in memory during a pass.

    Args:
        annotations_file: The CSV (header line, then ``file_name,label`` rows).
        img_dir: Folder the file names are relative to.
        transform: Applied to the PIL image.
        num_classes: If given, labels must lie in ``0 .. num_classes - 1``.
        shuffle_buffer: Shuffle within a buffer of this many samples (0: stream order).
        seed: Seed of the shuffle buffer; combined with the epoch and the shard.
        rank: This process's rank (distributed training), 0 otherwise.
        world_size: Number of processes.
        split_workers: ``False`` reproduces the classic bug: every worker reads every row.
        max_pixels: Refuse images with more pixels (default ``PIL.Image.MAX_IMAGE_PIXELS``).

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """

    def __init__(self, annotations_file: str | os.PathLike, img_dir: str | os.PathLike,
                 transform: Callable | None = None, *, num_classes: int | None = None,
                 shuffle_buffer: int = 0, seed: int = 0, rank: int = 0, world_size: int = 1,
                 split_workers: bool = True, max_pixels: int | None = None) -> None:
        self.annotations_file = Path(annotations_file)
        self.img_dir = Path(img_dir)
        if not self.annotations_file.is_file():
            raise FileNotFoundError(f"annotations file {self.annotations_file} does not exist")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
        self.transform = transform
        self.num_classes = num_classes
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.split_workers = split_workers
        self.max_pixels = max_pixels
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Change the shuffle order for the next pass (call before each epoch)."""
        self.epoch = epoch

    def rows(self) -> Iterator[tuple[int, str, int]]:
        """This shard's ``(csv line, file name, label)`` rows, validated."""
        shard, num_shards = shard_of(self.rank, self.world_size)
        if not self.split_workers:
            shard, num_shards = self.rank, self.world_size
        name = self.annotations_file.name
        first_seen: dict[str, tuple[int, int]] = {}  # normalized file name -> (line, label)
        repeats = []
        with open(self.annotations_file, "rb") as handle:
            reader = csv.reader(decode_text(raw, name, first_line=number)
                                for number, raw in enumerate(handle, start=1))
            if next(reader, None) is None:
                raise BadSampleError(f"{self.annotations_file} is empty")
            for i, row in enumerate(reader):
                line = i + 2
                if len(row) != 2:
                    raise BadSampleError(f"{name} line {line}: expected 2 fields, got {row}")
                label = parse_label(row[1], where=f"{name} line {line}: {row[0]!r}",
                                    num_classes=self.num_classes)
                first_line, first_label = first_seen.setdefault(os.path.normpath(row[0]),
                                                                (line, label))
                if first_label != label:
                    raise BadSampleError(f"{name} line {line}: file {row[0]!r} has conflicting "
                                         f"labels (line {first_line} label {first_label}, line "
                                         f"{line} label {label}); one file needs one label")
                if first_line != line:
                    repeats.append((line, row[0], first_line))
                if i % num_shards == shard:
                    yield line, row[0], label
        if repeats and shard == 0:
            line, file_name, first = repeats[0]
            warnings.warn(f"{name}: {len(repeats)} row(s) repeat a file already listed with the "
                          f"same label, first {file_name!r} at line {line} (also line {first}); "
                          "each row is streamed as a sample", stacklevel=2)

    def _load(self, line: int, file_name: str, label: int):
        where = f"{self.annotations_file.name} line {line}"
        image = load_rgb(resolve_inside(self.img_dir, file_name, where=where), where=where,
                         max_pixels=self.max_pixels)
        return (self.transform(image) if self.transform else image), label

    def __iter__(self):
        rows = self.rows()
        if self.shuffle_buffer <= 1:
            for row in rows:
                yield self._load(*row)
            return
        shard, _ = shard_of(self.rank, self.world_size)
        rng = np.random.default_rng([self.seed, self.epoch, shard])
        buffer: list[tuple[int, str, int]] = []
        for row in rows:
            buffer.append(row)
            if len(buffer) >= self.shuffle_buffer:
                yield self._load(*buffer.pop(int(rng.integers(len(buffer)))))
        rng.shuffle(buffer)
        for row in buffer:
            yield self._load(*row)
