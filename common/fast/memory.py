"""Worker memory: copy-on-read with a list-of-Python-objects index vs a NumPy index.

A forked DataLoader worker shares the parent's memory pages until it writes to them.
Reading a Python object *writes* to it (its reference count changes, and the garbage
collector touches the headers of tracked objects such as tuples), so a worker that walks
a list of ``(path, label)`` tuples gradually copies every page holding them: its private
memory (USS) grows towards the size of the whole index, once per worker. A NumPy array of
fixed-width strings is one buffer with no per-item reference counts; reading it copies
nothing. Both index datasets below return tiny batches and report the worker's own
memory, so one epoch through a ``DataLoader`` shows the growth directly.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pandas as pd
import psutil
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from common.fast.pipeline import keep_batch

MB = 1024 * 1024


def process_memory(pid: int | None = None) -> dict[str, float]:
    """RSS, USS and PSS (where the OS reports it) of a process, in MiB.

    USS is memory only this process holds (what copy-on-read adds to); PSS shares each
    shared page between the processes that map it; RSS counts shared pages in full.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    info = psutil.Process(pid or os.getpid()).memory_full_info()
    return {"rss_mb": info.rss / MB, "uss_mb": info.uss / MB,
            "pss_mb": getattr(info, "pss", float("nan")) / MB}


def make_index(num_items: int) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic index of ``num_items`` file names and labels, as NumPy arrays.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    names = np.array([f"images/class_{i % 6}/img_{i:08d}.jpg" for i in range(num_items)])
    return names.astype(np.str_), (np.arange(num_items) % 6).astype(np.int64)


class _IndexDataset(Dataset):
    """Shared shape of both index variants; subclasses define ``_touch``."""

    def __len__(self) -> int:
        return self.num_items

    def __getitem__(self, idx: int) -> int:
        return self._touch([idx])

    def __getitems__(self, indices: Sequence[int]) -> dict:
        checksum = self._touch(indices)
        info = get_worker_info()
        return {"worker": -1 if info is None else info.id, "checksum": checksum,
                "batch_size": len(indices), **process_memory()}


class ListIndexDataset(_IndexDataset):
    """The index as a Python list of ``(path, label)`` tuples (like ``ImageFolder.samples``).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, names: np.ndarray, labels: np.ndarray) -> None:
        self.samples = [(str(n), int(t)) for n, t in zip(names, labels, strict=True)]
        self.num_items = len(self.samples)

    def _touch(self, indices: Sequence[int]) -> int:
        total = 0
        for i in indices:
            path, label = self.samples[i]
            total += len(path) + label
        return total


class ArrayIndexDataset(_IndexDataset):
    """The same index as two NumPy arrays (fixed-width strings, int64 labels).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, names: np.ndarray, labels: np.ndarray) -> None:
        self.names = np.asarray(names, dtype=np.str_)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.num_items = len(self.labels)

    def _touch(self, indices: Sequence[int]) -> int:
        total = 0
        for i in indices:
            total += len(str(self.names[i])) + int(self.labels[i])
        return total


def worker_memory_over_epoch(dataset: _IndexDataset, *, num_workers: int = 2,
                             batch_size: int = 2048, every: int = 1) -> pd.DataFrame:
    """Run one epoch with forked workers; each batch reports its worker's memory.

    Args:
        dataset: A :class:`ListIndexDataset` or :class:`ArrayIndexDataset`.
        num_workers: Worker processes (``fork`` start method: copy-on-write is the point).
        batch_size: Indices per batch.
        every: Keep every ``every``-th batch's report.

    Returns:
        One row per kept batch: ``batch``, ``worker``, ``seen`` (fraction of the epoch),
        ``rss_mb``, ``uss_mb``, ``pss_mb``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    if num_workers < 1:
        raise ValueError("worker memory needs num_workers >= 1")
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                        collate_fn=keep_batch, multiprocessing_context="fork",
                        generator=torch.Generator().manual_seed(0))
    rows, seen = [], 0
    for number, report in enumerate(loader):
        seen += report["batch_size"]
        if number % every == 0:
            rows.append({"batch": number, "seen": seen / len(dataset), **report})
    return pd.DataFrame(rows).drop(columns=["checksum", "batch_size"])


def _worker_pids(loader) -> list[int]:
    # The live workers of a persistent DataLoader (private attributes: DataLoader has no
    # public way to list them); NormalizedLoader keeps its DataLoader as `.loader`.
    inner = getattr(loader, "loader", loader)
    iterator = getattr(inner, "_iterator", None)
    return [w.pid for w in getattr(iterator, "_workers", []) if w.pid is not None]


def pipeline_pss_mb(loader) -> float:
    """PSS of this process plus the loader's own worker processes, in MiB.

    PSS splits each shared page between the processes mapping it, so the sum counts memory
    once; the memmap's page-cache pages appear while they are mapped. The main process's
    share is common to every pipeline of a run (the interpreter, torch, the datasets).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    total = 0.0
    for pid in [os.getpid(), *_worker_pids(loader)]:
        try:
            total += getattr(psutil.Process(pid).memory_full_info(), "pss", float("nan")) / MB
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # a worker that exited between the listing and the read
    return total
