"""common.fast.memory: copy-on-read grows list-index workers, not NumPy-index workers."""

from __future__ import annotations

from common.fast.memory import (
    ArrayIndexDataset,
    ListIndexDataset,
    make_index,
    process_memory,
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
