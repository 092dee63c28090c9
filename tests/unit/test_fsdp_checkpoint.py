"""Tests for common/fsdp/checkpoint.py and sharding.py in one process: atomic saves, clear
errors for bad checkpoints (nothing overwritten), conversion to and from ``torch.save``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from torch import nn

from common.fsdp.checkpoint import (
    CheckpointError,
    checkpoint_dirs,
    from_torch_save,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    to_torch_save,
)
from common.fsdp.sharding import bytes_per_rank, local_bytes


def _model(width: int = 4) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(5, 6)).sum().backward()
    optimizer.step()
    return model, optimizer


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture
def saved(tmp_path):
    model, optimizer = _model()
    save_checkpoint(tmp_path, 1, model=model, optimizer=optimizer, extra={"position": {"step": 1}})
    return tmp_path, model


def test_save_load_round_trip_with_extra(saved):
    root, model = saved
    fresh, optimizer = _model()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    extra = load_checkpoint(latest_checkpoint(root), model=fresh, optimizer=optimizer,
                            extra={"position": {"step": 0}})
    assert extra["position"]["step"] == 1
    for a, b in zip(fresh.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_save_interrupted_after_writing_leaves_the_previous_checkpoint(saved):
    root, _ = saved
    model, optimizer = _model()

    def crash(_tmp):
        raise KeyboardInterrupt  # what a kill between writing and publishing leaves
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(root, 2, model=model, optimizer=optimizer, on_written=crash)
    assert [p.name for p in checkpoint_dirs(root)] == ["step-000001"]
    assert (root / ".step-000002.tmp" / ".metadata").exists()  # written, never published
    load_checkpoint(latest_checkpoint(root), model=model, optimizer=optimizer)
    save_checkpoint(root, 2, model=model, optimizer=optimizer, keep=1)  # cleans up after it
    assert [p.name for p in root.iterdir()] == ["step-000002"]


def test_a_checkpoint_of_another_model_is_refused_naming_the_file(saved):
    root, _ = saved
    before = _digest(root / "step-000001")
    other, optimizer = _model(width=8)
    with pytest.raises(CheckpointError, match=r"step-000001/\.metadata: written for another model"):
        load_checkpoint(root / "step-000001", model=other, optimizer=optimizer)
    assert _digest(root / "step-000001") == before


def test_missing_shard_and_truncated_metadata_name_the_file(saved):
    root, _ = saved
    folder = root / "step-000001"
    model, optimizer = _model()
    (folder / "__0_0.distcp").rename(root / "moved.distcp")
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp: shard file missing"):
        load_checkpoint(folder, model=model, optimizer=optimizer)
    (root / "moved.distcp").rename(folder / "__0_0.distcp")
    meta = folder / ".metadata"
    meta.write_bytes(meta.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"\.metadata: unreadable .* truncated"):
        load_checkpoint(folder, model=model, optimizer=optimizer)
    meta.unlink()
    with pytest.raises(CheckpointError, match=r"\.metadata: missing"):
        load_checkpoint(folder, model=model, optimizer=optimizer)


def test_conversion_to_torch_save_and_back(saved, tmp_path):
    root, model = saved
    file = to_torch_save(root / "step-000001", tmp_path / "model.pt")
    full = torch.load(file, weights_only=False)
    for key, value in model.state_dict().items():
        assert torch.equal(full["model"][key], value)
    back = from_torch_save(file, tmp_path / "back")
    assert (back / ".metadata").is_file()
    with pytest.raises(CheckpointError, match="refusing to overwrite"):
        from_torch_save(file, back)


def test_bytes_on_paper_and_measured():
    model, optimizer = _model()
    params = sum(p.numel() for p in model.parameters())
    assert local_bytes(model, optimizer)["parameters"] == 4 * params
    assert local_bytes(model, optimizer)["gradients"] == 4 * params
    assert bytes_per_rank(1_000_000_000, world_size=1, stage=0) == 16_000_000_000
    assert bytes_per_rank(1_000_000_000, world_size=8, stage=3) == 2_000_000_000
    assert bytes_per_rank(100, world_size=4, stage=1) == 100 * (4 + 4 + 2)
    with pytest.raises(ValueError, match="stage"):
        bytes_per_rank(1, world_size=2, stage=4)
