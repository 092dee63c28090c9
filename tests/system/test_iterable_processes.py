"""Tests for common.datasets.iterable: per-worker (and per-rank) splitting of the CSV stream — the tests that start processes (the rest: tests/unit/test_iterable.py)."""

from __future__ import annotations

import pytest

from tests.unit.test_iterable import fingerprints, stream


def test_two_workers_read_every_row_exactly_once(tiny_data):
    reference = fingerprints(stream(tiny_data))
    assert sum(reference.values()) == 24 and max(reference.values()) == 1
    assert fingerprints(stream(tiny_data), num_workers=2) == reference


def test_without_splitting_every_worker_repeats_the_stream(tiny_data):
    reference = fingerprints(stream(tiny_data))
    naive = fingerprints(stream(tiny_data, split_workers=False), num_workers=2)
    assert naive == reference + reference


@pytest.mark.slow
def test_split_survives_spawn(tiny_data):
    reference = fingerprints(stream(tiny_data))
    assert fingerprints(stream(tiny_data), num_workers=2,
                        multiprocessing_context="spawn") == reference
