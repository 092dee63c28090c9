"""Tests for common/ddp/snapshot.py: round trip, atomic writes, refusing bad files."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

from common.ddp.snapshot import (
    Position,
    SnapshotError,
    atomic_save,
    load_snapshot,
    read_snapshot,
    save_snapshot,
)


def _parts(width: int = 3):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, width), nn.BatchNorm1d(width), nn.Linear(width, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 10)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def _write(path, width: int = 3):
    model, optimizer, scheduler = _parts(width)
    save_snapshot(path, model=model, optimizer=optimizer, scheduler=scheduler,
                  position=Position(epoch=2, step=7, batch_in_epoch=3))
    return model, optimizer, scheduler


def test_round_trip_restores_everything(tmp_path):
    path = tmp_path / "snap.pt"
    model, optimizer, scheduler = _write(path)
    expected_next = torch.rand(3)  # drawn right after the RNG state was captured
    torch.manual_seed(123)
    fresh, fresh_opt, fresh_sched = _parts()
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(1.0)
    position = load_snapshot(path, model=fresh, optimizer=fresh_opt, scheduler=fresh_sched)
    assert position == Position(2, 7, 3)
    assert torch.equal(torch.rand(3), expected_next)
    for key, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key
    momentum = [s["momentum_buffer"] for s in optimizer.state_dict()["state"].values()]
    restored = [s["momentum_buffer"] for s in fresh_opt.state_dict()["state"].values()]
    assert all(torch.equal(a, b) for a, b in zip(momentum, restored, strict=True))
    assert fresh_sched.state_dict()["last_epoch"] == scheduler.state_dict()["last_epoch"] == 1


def test_atomic_save_leaves_no_temporary_files_and_removes_stale_ones(tmp_path):
    stale = tmp_path / ".snap.pt.abc123.tmp"
    stale.write_bytes(b"half a snapshot")
    atomic_save({"x": torch.ones(2)}, tmp_path / "snap.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap.pt"]
    assert torch.equal(torch.load(tmp_path / "snap.pt", weights_only=True)["x"], torch.ones(2))


def test_refuses_snapshot_of_another_model_and_changes_nothing(tmp_path):
    path = tmp_path / "snap.pt"
    _write(path, width=3)
    before = path.read_bytes()
    other, other_opt, _ = _parts(width=5)
    weights = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(SnapshotError, match=r"not of this Sequential: 0\.weight has shape \(3, 4\)"):
        load_snapshot(path, model=other, optimizer=other_opt)
    assert path.read_bytes() == before
    assert all(torch.equal(other.state_dict()[k], v) for k, v in weights.items())
    with pytest.raises(SnapshotError, match="missing"):
        load_snapshot(path, model=nn.Sequential(nn.Linear(4, 3)))


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.99])
def test_refuses_truncated_snapshot(tmp_path, fraction):
    path = tmp_path / "snap.pt"
    _write(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(SnapshotError, match="truncated or not a PyTorch file"):
        read_snapshot(path)
    assert path.read_bytes() == data[: int(len(data) * fraction)]


def test_refuses_non_tensor_pickles(tmp_path):
    torch_file, plain_pickle = tmp_path / "objects.pt", tmp_path / "plain.pkl"
    torch.save({"format": "x", "position": Position()}, torch_file)
    with plain_pickle.open("wb") as handle:
        pickle.dump(Position(), handle)
    with pytest.raises(SnapshotError, match="objects other than tensors.*snapshot.Position"):
        read_snapshot(torch_file)
    with (pytest.warns(UserWarning, match="pickle protocol"),
          pytest.raises(SnapshotError, match="objects other than tensors.*Unsupported operand")):
        read_snapshot(plain_pickle)


def test_refuses_a_plain_state_dict_and_a_missing_file(tmp_path):
    torch.save(nn.Linear(2, 2).state_dict(), tmp_path / "weights.pt")
    with pytest.raises(SnapshotError, match="is not a companion-ddp-snapshot-v1 snapshot"):
        read_snapshot(tmp_path / "weights.pt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_snapshot(tmp_path / "nothing.pt")


_WRITER = """
import sys, torch
from common.ddp.snapshot import atomic_save
version = 0
while True:
    atomic_save({"version": torch.tensor(version),
                 "payload": torch.full((3_000_000,), float(version))}, sys.argv[1])
    print(version, flush=True)
    version += 1
"""


@pytest.mark.slow
def test_kill_during_write_keeps_a_complete_latest_snapshot(tmp_path):
    path = tmp_path / "snap.pt"
    for _round in range(3):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            writer.stdout.readline()  # at least one complete snapshot exists
            deadline = time.monotonic() + 30
            while not list(tmp_path.glob(".snap.pt.*.tmp")) and time.monotonic() < deadline:
                time.sleep(0.001)
            assert list(tmp_path.glob(".snap.pt.*.tmp")), "never caught the writer mid-write"
            writer.send_signal(signal.SIGKILL)
        finally:
            writer.kill()
            writer.wait()
        snapshot = torch.load(path, weights_only=True)
        assert torch.all(snapshot["payload"] == snapshot["version"].float())
        assert snapshot["payload"].numel() == 3_000_000
