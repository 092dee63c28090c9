"""What tests of several modules share, under public names: a test module's own helpers stay private
to it (``tests/unit/test_references.py`` checks that no module reaches another's ``_name``).

Grouped by the code under test: the shards (``common.shards``), the data-wait meter
(``common.fast.profiling``), the snapshot writer (``common.ddp.snapshot``), an installed copy of the
packages (``common.paths``), ``data_scripts/make_shards.py`` and the exercises' solutions.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path
from types import ModuleType

import nbformat
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from common.fast.profiling import DataWaitMeter
from common.shards import ShardedImageDataset, file_sha256, read_manifest, read_shard
from course.assignments import BEGIN_HIDDEN, BEGIN_SOLUTION, END_HIDDEN, END_SOLUTION

REPO = Path(__file__).resolve().parents[1]
MAKE_SHARDS = REPO / "data_scripts" / "make_shards.py"

# --- Shards. ---


def pixel_hash(array) -> str:
    """The sha256 of an image's pixels and shape: two decodes of one image compare equal."""
    array = np.ascontiguousarray(np.asarray(array))
    return hashlib.sha256(array.tobytes() + str(array.shape).encode()).hexdigest()


def consume(dataset: ShardedImageDataset, num_workers: int, batch_size=None) -> list:
    """``(pixel hash, label)`` of every sample a DataLoader over ``dataset`` yields, in order."""
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
    return [(pixel_hash(image.numpy()), int(label)) for image, label in loader]


def add_member(tar: tarfile.TarFile, name: str, data: bytes, kind=tarfile.REGTYPE) -> None:
    """A member of ``kind`` (a link points at /etc/passwd) with ``data`` added to ``tar``."""
    info = tarfile.TarInfo(name)
    info.size, info.type = (len(data), kind) if kind == tarfile.REGTYPE else (0, kind)
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def copy_shards(manifest: Path, folder: Path) -> Path:
    """The shards and manifest of ``manifest`` copied into ``folder``; the first shard's copy."""
    shards = read_manifest(manifest)
    for shard in shards:
        (folder / shard.path.name).write_bytes(shard.path.read_bytes())
    (folder / "manifest.json").write_text(manifest.read_text())
    return folder / shards[0].path.name


def copy_with_manifest(manifest: Path, folder: Path, edit) -> None:
    """``copy_shards``, then the copied manifest changed by ``edit(dict)``."""
    copy_shards(manifest, folder)
    written = json.loads((folder / "manifest.json").read_text())
    edit(written)
    (folder / "manifest.json").write_text(json.dumps(written))


def repack(shard: Path, path: Path) -> Path:
    """The samples of ``shard`` in a new tar: same keys, other bytes (so another sha256)."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for record in read_shard(shard):
            add_member(tar, record.member, record.data)
            add_member(tar, f"{record.key}.cls", str(record.label).encode())
    return path


def with_extra_shard(manifest: Path, folder: Path, extra: Path) -> None:
    """A copy of the shards whose manifest lists one more shard, with its true sha256."""
    def listed(written):
        written["shards"].append({"name": extra.name, "num_samples": len(list(read_shard(extra))),
                                  "sha256": file_sha256(extra)})
        written["num_samples"] += written["shards"][-1]["num_samples"]

    copy_with_manifest(manifest, folder, listed)


# --- The data-wait meter. ---


class SleepyDataset(Dataset):
    """Each item takes ``delay`` seconds to produce."""

    def __init__(self, length: int, delay: float) -> None:
        self.length, self.delay = length, delay

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.delay)
        return torch.tensor(index)


class ReadLog(Dataset):
    """``dataset``, with each read appended to ``path`` as ``pid start end`` (``time.monotonic``,
    one clock for every process of the machine): which process read when, for facts about overlap."""

    def __init__(self, dataset: Dataset, path: Path) -> None:
        self.dataset, self.path = dataset, path

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        start = time.monotonic()
        item = self.dataset[index]
        with open(self.path, "a") as log:
            log.write(f"{os.getpid()} {start} {time.monotonic()}\n")
        return item


def read_intervals(path: Path) -> list[tuple[int, float, float]]:
    """The ``(pid, start, end)`` of every read a ``ReadLog`` wrote to ``path``."""
    return [(int(pid), float(start), float(end))
            for pid, start, end in (line.split() for line in path.read_text().splitlines())]


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether the intervals ``(start, end)`` ``a`` and ``b`` share a moment."""
    return a[0] < b[1] and b[0] < a[1]


def data_wait(data_delay: float, step_delay: float, *, num_workers: int = 0,
              length: int = 9) -> DataWaitMeter:
    """The meter after a loop whose data takes ``data_delay`` s per item and whose step ``step_delay``."""
    loader = DataLoader(SleepyDataset(length, data_delay), batch_size=1,
                        num_workers=num_workers)
    meter = DataWaitMeter()
    for _ in meter.wrap(loader):
        time.sleep(step_delay)
    return meter


# --- Programs and copies. ---

#: A program that saves ever newer snapshots at ``argv[1]`` and prints each version saved.
SNAPSHOT_WRITER = """
import sys, torch
from common.ddp.snapshot import atomic_save
version = 0
while True:
    atomic_save({"version": torch.tensor(version),
                 "payload": torch.full((3_000_000,), float(version))}, sys.argv[1])
    print(version, flush=True)
    version += 1
"""


def installed_copy(tmp_path: Path) -> dict[str, str]:
    """`common` and `course` copied outside any checkout, as `pip install .` would leave them: the
    environment that runs them."""
    site = tmp_path / "site"
    for package in ("common", "course"):
        shutil.copytree(REPO / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("COMPANION_REPO", "COMPANION_DATA")}
    return {**env, "PYTHONPATH": str(site), "HOME": str(tmp_path / "home")}


def load_make_shards() -> ModuleType:
    """``data_scripts/make_shards.py`` imported as the module ``make_shards``."""
    spec = importlib.util.spec_from_file_location("make_shards", MAKE_SHARDS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def solution_lines(source: nbformat.NotebookNode) -> set[str]:
    """The lines a solution or a hidden check holds that the notebook holds nowhere else: what a
    student version must never show (short lines such as ``return x`` are everywhere)."""
    inside, outside = set(), set()
    for cell in source.cells:
        region = None
        for line in cell.source.splitlines():
            if line.strip() in (BEGIN_SOLUTION, BEGIN_HIDDEN):
                region = line.strip()
            elif line.strip() in (END_SOLUTION, END_HIDDEN):
                region = None
            (inside if region else outside).add(line.strip())
    return {line for line in inside - outside if len(line) >= 20}
