"""common.fast.memory: copy-on-read grows list-index workers, not NumPy-index workers."""

from __future__ import annotations

import numpy as np
import pytest

from common.fast.memory import (
    ArrayIndexDataset,
    ListIndexDataset,
    make_index,
    process_memory,
    worker_memory_over_epoch,
)


def test_process_memory_reports_this_process():
    memory = process_memory()
    assert 0 < memory["uss_mb"] <= memory["rss_mb"]


def test_both_index_variants_hold_the_same_index():
    names, labels = make_index(1000)
    assert len(set(names.tolist())) == 1000 and set(labels.tolist()) == set(range(6))
    as_list, as_array = ListIndexDataset(names, labels), ArrayIndexDataset(names, labels)
    indices = [0, 17, 999, 500]
    assert len(as_list) == len(as_array) == 1000
    report = as_array.__getitems__(indices)
    assert as_list.__getitems__(indices)["checksum"] == report["checksum"]
    assert report["checksum"] == sum(len(names[i]) + labels[i] for i in indices)
    assert report["worker"] == -1 and report["batch_size"] == 4


@pytest.mark.slow
def test_list_index_workers_grow_numpy_index_workers_do_not():
    names, labels = make_index(200_000)
    growth = {}
    for name, cls in (("list", ListIndexDataset), ("array", ArrayIndexDataset)):
        frame = worker_memory_over_epoch(cls(names, labels), num_workers=2, batch_size=10_000)
        assert sorted(frame["worker"].unique()) == [0, 1]
        assert np.isclose(frame["seen"].iloc[-1], 1.0)
        per_worker = frame.groupby("worker")["uss_mb"].agg(["first", "last"])
        growth[name] = float((per_worker["last"] - per_worker["first"]).mean())
    assert growth["list"] > 4.0  # MiB copied into each worker by reading the list
    assert growth["list"] > 3 * max(growth["array"], 0.5)
