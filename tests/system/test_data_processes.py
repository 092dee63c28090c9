"""Tests for common.data: the guide's datasets, their validation and the skip policy — the tests that start processes (the rest: tests/unit/test_data.py)."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from common.data import (
    BadSampleError,
)
from tests.unit.test_data import build, img_dir, png_header  # noqa: F401


def test_huge_image_in_a_worker_names_file_and_line(tmp_path, img_dir):
    png_header(img_dir / "bomb.png", 20000, 20000)
    dataset = build(tmp_path, img_dir, "file_name,label\nbomb.png,2\n")
    loader = DataLoader(dataset, batch_size=None, num_workers=1)
    with pytest.raises(BadSampleError, match=r"bomb\.png \(labels\.csv line 2\)"):
        next(iter(loader))
