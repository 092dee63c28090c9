"""common.fast.pipeline: the uint8 formulations reproduce the guide's eval tensors — the tests that start processes (the rest: tests/unit/test_fastdata.py)."""

from __future__ import annotations

import pytest
import torch

from common.fast.pipeline import (
    Uint8EvalDataset,
    make_fast_loader,
)


@pytest.mark.slow
def test_fast_loader_with_workers_matches_in_process(tiny_data):
    dataset = Uint8EvalDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))
    alone = torch.cat([b[0] for b in make_fast_loader(dataset, batch_size=8)])
    workers = make_fast_loader(dataset, batch_size=8, num_workers=2, prefetch_factor=1)
    assert torch.equal(torch.cat([b[0] for b in workers]), alone)
