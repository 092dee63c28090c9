"""common.fast.memory: copy-on-read grows list-index workers, not NumPy-index workers — the tests that start processes (the rest: tests/unit/test_memory.py)."""

from __future__ import annotations

import numpy as np
import pytest

from common.fast.memory import (
    ArrayIndexDataset,
    ListIndexDataset,
    make_index,
    worker_memory_over_epoch,
)


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
