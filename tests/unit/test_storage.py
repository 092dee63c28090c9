"""common.storage: SlowStorage waits as stated, changes nothing, and works in workers."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

from common import storage as storage_module
from common.storage import SlowStorage


def make_dataset(n: int = 8) -> TensorDataset:
    return TensorDataset(torch.arange(n * 3, dtype=torch.float32).view(n, 3), torch.arange(n))


def test_every_read_waits_at_least_the_latency():
    storage = SlowStorage(make_dataset(), latency_s=0.02)
    start = time.perf_counter()
    for i in range(5):
        storage[i]
    assert time.perf_counter() - start >= 5 * 0.02


def test_each_read_waits_exactly_its_latency_and_none_without(monkeypatch):
    waited = []
    monkeypatch.setattr(storage_module, "time", SimpleNamespace(sleep=waited.append))
    for i in range(8):
        SlowStorage(make_dataset(), latency_s=0)[i]
    assert waited == [0.0] * 8, "no latency: every read waits nothing"
    waited.clear()
    slow = SlowStorage(make_dataset(), latency_s=0.02, stall_s=0.5, stall_every=3)
    for i in range(6):
        slow[i]
    assert waited == pytest.approx([0.02, 0.02, 0.52, 0.02, 0.02, 0.52]), "the 3rd and 6th read stall"


def test_samples_pass_through_unchanged():
    dataset = make_dataset()
    storage = SlowStorage(dataset, latency_s=0.0)
    assert len(storage) == len(dataset)
    for i in (0, 3, -1):
        (x, y), (ex, ey) = storage[i], dataset[i]
        assert torch.equal(x, ex) and torch.equal(y, ey)
    with pytest.raises(IndexError, match="out of range"):
        storage[len(dataset)]


def test_stalls_are_every_kth_read_and_deterministic():
    storage = SlowStorage(make_dataset(8), latency_s=0.001, stall_s=0.05, stall_every=4)
    assert [storage.wait_s(i) for i in range(8)] == pytest.approx(
        [0.001, 0.001, 0.001, 0.051, 0.001, 0.001, 0.001, 0.051])
    start = time.perf_counter()
    storage[3]
    assert time.perf_counter() - start >= 0.05


@pytest.mark.parametrize("latency", [-0.001, math.nan, math.inf])
def test_bad_latency_is_refused(latency):
    with pytest.raises(ValueError, match="latency_s"):
        SlowStorage(make_dataset(), latency_s=latency)


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="latency_s"):
        SlowStorage(make_dataset(), latency_s="5ms")
    with pytest.raises(ValueError, match="stall_every"):
        SlowStorage(make_dataset(), stall_every=-1)
    with pytest.raises(ValueError, match="needs stall_every"):
        SlowStorage(make_dataset(), stall_s=0.1)
    with pytest.raises(TypeError, match="map-style"):
        SlowStorage([1, 2, 3].__iter__())
