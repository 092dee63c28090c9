"""common.storage: SlowStorage waits as stated, changes nothing, and works in workers — the tests that start processes (the rest: tests/unit/test_storage.py)."""

from __future__ import annotations

import pickle
import time

import torch
from torch.utils.data import DataLoader

from common.storage import SlowStorage
from tests.unit.test_storage import make_dataset


def test_pickles_and_feeds_workers_with_the_same_batches():
    storage = SlowStorage(make_dataset(8), latency_s=0.001)
    clone = pickle.loads(pickle.dumps(storage))
    assert clone.latency_s == 0.001 and torch.equal(clone[2][0], storage[2][0])
    batches = list(DataLoader(storage, batch_size=4, num_workers=2))
    in_process = list(DataLoader(storage, batch_size=4))
    assert len(batches) == 2
    for (x, y), (ex, ey) in zip(batches, in_process, strict=True):
        assert torch.equal(x, ex) and torch.equal(y, ey)


def test_workers_overlap_the_waits():
    # 8 reads of 50 ms: 0.4 s in one process, about half with two workers
    storage = SlowStorage(make_dataset(8), latency_s=0.05)
    loader = DataLoader(storage, batch_size=2, num_workers=2, persistent_workers=True)
    list(loader)  # start the workers
    start = time.perf_counter()
    list(loader)
    assert time.perf_counter() - start < 0.35
