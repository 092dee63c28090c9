"""Tests for common/fsdp/sharding.py ``shard_model``, in this process: a gloo group of one
rank on an in-memory store (no process started), so ``fully_shard`` runs for real."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from common.fsdp.sharding import shard_model


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _after_forward(**options) -> dict[str, bool]:
    """Which parameters are sharded DTensors again right after a forward pass."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))  # the root owns model[1]
    shard_model(model, units=[model[0]], **options)
    model(torch.randn(3, 4))
    return {"unit": isinstance(model[0].weight, DTensor),
            "root": isinstance(model[1].weight, DTensor)}


def test_by_default_units_reshard_and_the_root_keeps_its_parameters(group):
    assert _after_forward() == {"unit": True, "root": False}


def test_the_flag_sets_the_units_and_leaves_the_root_to_torch(group):
    assert _after_forward(reshard_after_forward=True) == {"unit": True, "root": False}
    assert _after_forward(reshard_after_forward=False) == {"unit": False, "root": False}


def test_the_sharded_model_computes_what_the_plain_one_does(group):
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    sharded = shard_model(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)))
    with torch.no_grad():
        for mine, theirs in zip(sharded.parameters(), plain.parameters(), strict=True):
            mine.to_local().copy_(theirs)
    x = torch.randn(5, 4)
    torch.testing.assert_close(sharded(x), plain(x))
