"""common.storage: SlowStorage waits as stated, changes nothing, and works in workers — the tests that start processes (the rest: tests/unit/test_storage.py)."""

from __future__ import annotations

import pickle

import torch
from torch.utils.data import DataLoader

from common.storage import SlowStorage
from tests.helpers import ReadLog, overlap, read_intervals
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


def test_workers_overlap_the_waits(tmp_path):
    # 8 reads of 50 ms by two workers: each worker's reads wait while the other's do
    log = tmp_path / "reads.log"
    storage = ReadLog(SlowStorage(make_dataset(8), latency_s=0.05), log)
    loader = DataLoader(storage, batch_size=2, num_workers=2, persistent_workers=True)
    list(loader)  # start the workers
    log.unlink()
    list(loader)
    reads = read_intervals(log)
    assert len(reads) == 8 and len({pid for pid, _, _ in reads}) == 2
    assert any(overlap(a[1:], b[1:]) for a in reads for b in reads if a[0] != b[0]), \
        "no read of one worker waited while the other's did"
