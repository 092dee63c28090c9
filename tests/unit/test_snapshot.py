"""Tests for common/ddp/snapshot.py: round trip, atomic writes, refusing bad files."""

from __future__ import annotations

import pickle
import zipfile

import pytest
import torch
from torch import nn

from common.ddp.snapshot import (
    Position,
    SnapshotError,
    atomic_save,
    load_snapshot,
    payload_digest,
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
    with pytest.raises(SnapshotError, match="is not a companion-ddp-snapshot-v2 snapshot"):
        read_snapshot(tmp_path / "weights.pt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_snapshot(tmp_path / "nothing.pt")


def _rewrite(path, **changes) -> None:
    """Change entries of a snapshot and store a matching checksum (a well-formed lie)."""
    snapshot = torch.load(path, weights_only=True)
    snapshot.update(changes)
    snapshot["checksum"] = payload_digest({k: v for k, v in snapshot.items() if k != "checksum"})
    torch.save(snapshot, path)


def _state(model, optimizer) -> tuple[dict, dict]:
    return ({k: v.clone() for k, v in model.state_dict().items()}, optimizer.state_dict())


def _unchanged(model, optimizer, before) -> bool:
    weights, opt_state = before
    return (all(torch.equal(model.state_dict()[k], v) for k, v in weights.items())
            and repr(optimizer.state_dict()) == repr(opt_state))


@pytest.mark.parametrize(("changes", "message"), [
    ({"rng": []}, "the RNG entry must list one state per rank"),
    ({"rng": [{"python": "garbage", "torch": torch.zeros(3), "numpy": ()}]},
     "the RNG state of rank 0 cannot be restored"),
    ({"rng": [{"python": (3, (1, 2), None)}]}, "the RNG state of rank 0 cannot be restored"),
])
def test_garbage_rng_state_is_refused_before_anything_changes(tmp_path, changes, message):
    path = tmp_path / "snap.pt"
    _write(path)
    _rewrite(path, **changes)
    torch.manual_seed(5)
    model, optimizer, scheduler = _parts()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    before = _state(model, optimizer)
    with pytest.raises(SnapshotError, match=message):
        load_snapshot(path, model=model, optimizer=optimizer, scheduler=scheduler)
    assert _unchanged(model, optimizer, before)


def test_another_optimizer_is_refused_before_anything_changes(tmp_path):
    path = tmp_path / "snap.pt"
    _write(path)  # SGD with momentum
    model, _, _ = _parts()
    adamw = torch.optim.AdamW(model.parameters(), lr=0.1)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    before = _state(model, adamw)
    with pytest.raises(SnapshotError, match="holds SGD state; this run's optimizer is AdamW"):
        load_snapshot(path, model=model, optimizer=adamw)
    assert _unchanged(model, adamw, before)
    _rewrite(path, optimizer_class="AdamW")  # lying about the class: the groups still differ
    with pytest.raises(SnapshotError, match=r"parameter group 0 lacks \['amsgrad', 'betas'"):
        load_snapshot(path, model=model, optimizer=adamw)
    assert _unchanged(model, adamw, before)


def test_mismatched_parameter_groups_are_refused(tmp_path):
    path = tmp_path / "snap.pt"
    _write(path)
    model, _, _ = _parts()
    params = list(model.parameters())
    two_groups = torch.optim.SGD([{"params": params[:2]}, {"params": params[2:]}], lr=0.1,
                                 momentum=0.9)
    before = _state(model, two_groups)
    with pytest.raises(SnapshotError, match=r"1 parameter group\(s\) in the file, 2 in the"):
        load_snapshot(path, model=model, optimizer=two_groups)
    snapshot = torch.load(path, weights_only=True)
    state = snapshot["optimizer"]
    state["state"][0]["momentum_buffer"] = torch.zeros(7)
    _rewrite(path, optimizer=state)
    one_group = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(SnapshotError, match=r"momentum_buffer of parameter 0 has shape \(7,\)"):
        load_snapshot(path, model=model, optimizer=one_group)
    assert _unchanged(model, two_groups, before)


def test_a_flipped_byte_is_detected_by_the_checksum(tmp_path):
    path = tmp_path / "snap.pt"
    _write(path)
    with zipfile.ZipFile(path) as archive:  # the largest tensor's bytes, stored uncompressed
        entry = max((info for info in archive.infolist() if "/data/" in info.filename),
                    key=lambda info: info.file_size)
    data = bytearray(path.read_bytes())
    local_extra = int.from_bytes(data[entry.header_offset + 28:entry.header_offset + 30], "little")
    start = entry.header_offset + 30 + len(entry.filename.encode()) + local_extra
    data[start + entry.file_size // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="checksum mismatch, the file was damaged"):
        read_snapshot(path)


def test_resume_with_other_settings_names_each_difference(tmp_path):
    path = tmp_path / "snap.pt"
    model, optimizer, scheduler = _parts()
    save_snapshot(path, model=model, optimizer=optimizer, scheduler=scheduler,
                  position=Position(), settings={"lr": 0.1, "seed": 0, "num_epochs": 3})
    with torch.no_grad():
        model[0].weight.add_(1.0)
    before = _state(model, optimizer)
    with pytest.raises(SnapshotError, match=r"\(snapshot -> now\): --lr 0\.1 -> 0\.2; "
                                            r"--seed 0 -> 1\. Resume") as error:
        load_snapshot(path, model=model, optimizer=optimizer,
                      settings={"lr": 0.2, "seed": 1, "num_epochs": 5}, may_change={"num_epochs"})
    assert "--num-epochs 3" not in str(error.value)
    assert "may change on resume: --num-epochs" in str(error.value)
    assert _unchanged(model, optimizer, before)
    load_snapshot(path, model=model, optimizer=optimizer,
                  settings={"lr": 0.1, "seed": 0, "num_epochs": 5}, may_change={"num_epochs"})
