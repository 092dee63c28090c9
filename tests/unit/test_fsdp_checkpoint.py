"""Tests for common/fsdp/checkpoint.py, integrity.py and sharding.py in one process: atomic
saves, clear errors for bad checkpoints (nothing overwritten), digests that refuse a flipped
bit or a file of another run, conversion to and from ``torch.save``."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch import nn

from common.fsdp.checkpoint import (
    CheckpointError,
    async_save_checkpoint,
    check_checkpoint,
    check_one_run,
    checkpoint_dirs,
    from_torch_save,
    latest_checkpoint,
    load_checkpoint,
    read_manifest,
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


def _flip_one_bit(file: Path) -> None:
    """One bit in the middle of ``file``, its size and mtime kept."""
    stat = file.stat()
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x10
    file.write_bytes(bytes(data))
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_every_save_records_digests_step_and_run_in_the_metadata(saved, tmp_path):
    root, model = saved
    manifest = read_manifest(root / "step-000001")
    assert manifest.step == 1 and set(manifest.digests) == {"__0_0.distcp"}
    assert manifest.digests["__0_0.distcp"] == _digest(root / "step-000001")["__0_0.distcp"]
    assert sorted(p.name for p in (root / "step-000001").iterdir()) == [".metadata",
                                                                      "__0_0.distcp"]
    model, optimizer = _model()
    pending = async_save_checkpoint(tmp_path / "async", 4, model=model, optimizer=optimizer,
                                    run={"run_id": "r1"})
    published = pending.wait()
    assert read_manifest(published).run == {"run_id": "r1"}
    assert check_checkpoint(published, {"model": model.state_dict()}).step == 4


def test_a_flipped_bit_or_a_file_of_another_run_is_refused_naming_it(saved, tmp_path):
    root, _ = saved
    folder = root / "step-000001"
    model, optimizer = _model()
    good = (folder / "__0_0.distcp").read_bytes()
    _flip_one_bit(folder / "__0_0.distcp")
    with pytest.raises(CheckpointError, match=r"step-000001/__0_0\.distcp: its bytes are not "
                                              r"those written at step 1 \(sha256"):
        load_checkpoint(folder, model=model, optimizer=optimizer)
    other, other_optimizer = _model()
    with torch.no_grad():
        other[0].weight.add_(1.0)  # another run: same model, same step, other weights
    save_checkpoint(tmp_path / "other", 1, model=other, optimizer=other_optimizer,
                    extra={"position": {"step": 1}})
    shutil.copy(tmp_path / "other" / "step-000001" / "__0_0.distcp", folder / "__0_0.distcp")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match="swapped in from another step or another run"):
        load_checkpoint(folder, model=model, optimizer=optimizer)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    (folder / "__0_0.distcp").write_bytes(good)
    load_checkpoint(folder, model=model, optimizer=optimizer)  # the original bytes load again


def test_a_renamed_folder_another_run_and_a_changed_manifest_are_refused(saved):
    root, _ = saved
    model, optimizer = _model()
    shutil.copytree(root / "step-000001", root / "step-000005")
    with pytest.raises(CheckpointError, match=r"written at step 1, but the folder is step-000005"):
        load_checkpoint(root / "step-000005", model=model, optimizer=optimizer)
    save_checkpoint(root, 2, model=model, optimizer=optimizer, run={"run_id": "mine"})
    with pytest.raises(CheckpointError, match=r"written by another run \(run_id 'mine' there, "
                                              r"'yours' here\)"):
        load_checkpoint(root / "step-000002", model=model, optimizer=optimizer,
                        run={"run_id": "yours"})
    meta = root / "step-000002" / ".metadata"
    metadata = pickle.loads(meta.read_bytes())
    metadata.storage_meta.digests["__0_0.distcp"] = "0" * 64
    meta.write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match="manifest's checksum does not match"):
        load_checkpoint(root / "step-000002", model=model, optimizer=optimizer)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_plain_dcp_folders_are_refused_and_conversions_carry_digests(saved, tmp_path):
    root, model = saved
    _, optimizer = _model()
    plain = tmp_path / "plain"
    dcp.save({"model": model.state_dict()}, checkpoint_id=plain, no_dist=True)
    with pytest.raises(CheckpointError, match="holds no digests"):
        check_checkpoint(plain, {"model": model.state_dict()})
    back = from_torch_save(to_torch_save(root / "step-000001", tmp_path / "m.pt"), tmp_path / "b")
    fresh, fresh_optimizer = _model(width=4)
    load_checkpoint(back, model=fresh, optimizer=fresh_optimizer)
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in model.state_dict().items())


def test_check_one_run_names_the_newest_of_each_run(tmp_path):
    model, optimizer = _model()
    assert check_one_run(tmp_path) == ""
    for step, run_id in ((1, "a"), (2, "a"), (3, "b")):
        save_checkpoint(tmp_path, step, model=model, optimizer=optimizer, keep=9,
                        run={"run_id": run_id})
    with pytest.raises(CheckpointError, match=r"holds checkpoints of 2 runs: step-000002 \(run a\), "
                                              r"step-000003 \(run b\)"):
        check_one_run(tmp_path)
    shutil.rmtree(tmp_path / "step-000003")
    assert check_one_run(tmp_path) == "a"
