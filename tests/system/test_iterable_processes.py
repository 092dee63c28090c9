"""Tests for common.datasets.iterable: per-worker (and per-rank) splitting of the CSV stream — the tests that start processes (the rest: tests/unit/test_iterable.py).

The images become 8x8 tensors through ``small_tensor``, without torchvision: a spawned worker
imports this module to unpickle the stream, and torchvision's import would double its cost."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from common.datasets.iterable import CsvImageStream


def small_tensor(image) -> torch.Tensor:
    """The image resized to 8x8, as a uint8 tensor (channels first)."""
    return torch.from_numpy(np.array(image.resize((8, 8)))).permute(2, 0, 1)


def stream(tiny_data, **kwargs) -> CsvImageStream:
    return CsvImageStream(tiny_data.labels_csv("train"), tiny_data.images_dir("train"),
                          small_tensor, **kwargs)


def fingerprints(stream, num_workers=0, **kwargs) -> Counter:
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers, **kwargs)
    return Counter(hashlib.sha1(image.numpy().tobytes()).hexdigest() + f":{label}"
                   for image, label in loader)


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
