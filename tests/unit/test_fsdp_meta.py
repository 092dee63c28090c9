"""Tests for common/fsdp/meta.py: ``materialize`` and ``load_full_state_dict``, in this process
(one process, and a gloo group of one rank on an in-memory store, so ``fully_shard`` runs for
real); the same on 2 ranks: tests/system/test_fsdp_meta_processes.py."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from common.fsdp.meta import load_full_state_dict, materialize, state_mismatch
from common.fsdp.sharding import shard_model


class Scale(nn.Module):
    """A learned gain set to ones in ``__init__``, with no ``reset_parameters``."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


def _build() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.GroupNorm(2, 8), nn.Linear(8, 3))


def _on_meta(build=_build) -> nn.Module:
    with torch.device("meta"):
        return build()


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_materialize_equals_an_ordinary_build_with_the_same_seed():
    torch.manual_seed(3)
    model = materialize(_on_meta(), "cpu")
    torch.manual_seed(3)
    eager = _build()
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    for mine, theirs in zip(model.parameters(), eager.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_materialize_refuses_a_module_without_reset_parameters_and_allocates_nothing():
    model = _on_meta(lambda: nn.Sequential(nn.Linear(4, 4), Scale(4)))
    with pytest.raises(ValueError, match=r"module\(s\) '1' \(Scale\) hold .* no reset_param"):
        materialize(model, "cpu")
    assert model[0].weight.is_meta and model[1].gain.is_meta


def test_a_full_state_dict_loads_into_a_meta_built_model():
    torch.manual_seed(0)
    reference = _build()
    model = _on_meta()
    model.to_empty(device="cpu")
    load_full_state_dict(model, reference.state_dict())
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


def test_a_state_dict_that_does_not_fit_is_named_key_by_key_and_nothing_is_loaded():
    model = _build()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    full = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    full.pop("3.bias")
    full["3.weight"] = torch.zeros(4, 8)
    full["head.weight"] = torch.zeros(1)
    with pytest.raises(ValueError) as error:
        load_full_state_dict(model, full, source="model.pt")
    message = str(error.value)
    assert message.startswith("model.pt does not fit this model (Sequential)")
    assert "missing 1: 3.bias" in message and "unexpected 1: head.weight" in message
    assert "3.weight (4, 8) (model (3, 8))" in message
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


def test_a_long_mismatch_names_five_keys_and_counts_the_rest():
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(4)])
    message = state_mismatch(model, {})
    assert "missing 8: 0.bias, 0.weight, 1.bias, 1.weight, 2.bias and 3 more" in message
    assert state_mismatch(model, model.state_dict()) == ""


def test_rank0_without_a_state_dict_is_refused():
    with pytest.raises(ValueError, match="rank 0 passed no state dict"):
        load_full_state_dict(_build(), None)


def test_sharded_on_meta_then_filled_from_a_full_state_dict(group):
    torch.manual_seed(0)
    reference = _build()
    model = shard_model(_on_meta())
    model.to_empty(device="cpu")
    assert isinstance(model[0].weight, DTensor)
    load_full_state_dict(model, reference.state_dict())
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine.full_tensor(), theirs)


@pytest.mark.filterwarnings("ignore:DTensor random operators may not have complete support")
def test_sharded_and_materialized_in_a_group_of_one_equals_one_process(group):
    torch.manual_seed(5)
    model = materialize(shard_model(_on_meta()), "cpu")
    torch.manual_seed(5)
    eager = _build()
    for mine, theirs in zip(model.parameters(), eager.parameters(), strict=True):
        assert torch.equal(mine.full_tensor(), theirs)


def test_a_mismatch_in_a_group_raises_before_any_broadcast_of_tensors(group):
    model = shard_model(_build())
    with pytest.raises(ValueError, match="missing 1: 0.bias"):
        load_full_state_dict(model, {k: v.full_tensor() for k, v in model.state_dict().items()
                                     if k != "0.bias"})
