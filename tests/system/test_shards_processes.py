"""Tests for common/shards.py: exactly-once splitting, equal batches, shuffling, safe reading — the tests that start processes (the rest: tests/unit/test_shards.py)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from common.shards import ShardedImageDataset
from common.transforms import ClassicEvalPreset
from tests.helpers import consume, pixel_hash
from tests.unit.test_shards import source, source_multiset, uneven  # noqa: F401


@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_sample_exactly_once(uneven, source_multiset, world_size, num_workers):
    seen = Counter()
    for rank in range(world_size):
        dataset = ShardedImageDataset(uneven, np.array, rank=rank, world_size=world_size,
                                      equalize="none", seed=5, buffer_size=4)
        seen.update(consume(dataset, num_workers))
    assert seen == source_multiset


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("policy", ["pad", "drop"])
def test_equal_batches_per_rank(uneven, policy, num_workers):
    keys, batches = Counter(), []
    for rank in range(2):
        dataset = ShardedImageDataset(uneven, ClassicEvalPreset(resize_size=16, crop_size=16),
                                      rank=rank, world_size=2, equalize=policy, seed=1)
        loader = DataLoader(dataset, batch_size=3, num_workers=num_workers)
        batches.append(sum(1 for _ in loader))
        workers = max(num_workers, 1)
        for worker in range(workers):
            keys.update(r.key for r in dataset.records(worker=worker, num_workers=num_workers))
    plan = dataset.plan(num_workers)
    assert batches[0] == batches[1]
    assert plan.groupby("rank")["yields"].sum().nunique() == 1
    if policy == "pad":  # everything at least once; the repeats are exactly the padding
        assert len(keys) == 24 and sum(keys.values()) - 24 == plan["padded"].sum() > 0
    else:  # nothing twice; the missing ones are exactly the dropped
        assert max(keys.values()) == 1 and 24 - len(keys) == plan["dropped"].sum() > 0


def test_same_seed_and_epoch_same_order_other_epoch_differs(uneven):
    def order(epoch: int, seed: int = 0) -> list:
        dataset = ShardedImageDataset(uneven, np.array, seed=seed, buffer_size=6)
        dataset.set_epoch(epoch)
        return consume(dataset, num_workers=2)

    first = order(3)
    assert order(3) == first
    assert order(4) != first and sorted(order(4)) == sorted(first)
    assert order(3, seed=1) != first


def test_persistent_workers_follow_set_epoch(uneven):
    dataset = ShardedImageDataset(uneven, np.array, seed=3, buffer_size=4, equalize="none")
    loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    expected = {}
    for epoch in (0, 1, 2):
        dataset.set_epoch(epoch)
        expected[epoch] = consume(dataset, num_workers=2)  # fresh workers: the reference
    for epoch in (0, 1, 2):
        dataset.set_epoch(epoch)
        got = [(pixel_hash(image.numpy()), int(label)) for image, label in loader]
        assert got == expected[epoch]
    assert expected[0] != expected[1]


def test_shard_bench_times_with_one_main_thread_and_writes_its_table(tmp_path, monkeypatch):
    """The main process runs the timed loop on ``--threads`` (1) intra-op threads, restored after.

    With torch's default (one per core) the main process's spinning OpenMP threads competed
    with the DataLoader workers and hid most of the uint8 reader's gain at 2 workers.
    """
    import pandas as pd

    from common.shards import bench

    seen, real = [], bench.measure
    monkeypatch.setattr(bench, "measure", lambda *a, **k: seen.append(torch.get_num_threads())
                        or real(*a, **k))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert bench.main(["--quick", "--no-peers", "--no-progress", "--out", str(tmp_path)]) == 0
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    table = pd.read_csv(tmp_path / "shards.csv")
    assert set(zip(table.pipeline, table.num_workers, strict=True)) == {
        (name, workers) for name in ("shards_pil", "shards_uint8") for workers in (0, 1)}
    assert (table.images_per_s > 0).all()
    assert list(json.loads((tmp_path / "shards.json").read_text())["ratios"]) == [
        "shards_uint8 / shards_pil (num_workers=1)"]
