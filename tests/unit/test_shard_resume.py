"""common.shards.train --snapshot: the DDP trainer's resume contract, on shards (in-process)."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict

import pytest
import torch

from common.data import CustomImageDataset
from common.ddp.snapshot import SnapshotError, check_resume, read_snapshot
from common.shards import file_sha256, write_shards
from common.shards import train as shard_train
from tests.helpers import repack, with_extra_shard


def _write(tiny_data, root, split: str, shard_size: int = 5):
    dataset = CustomImageDataset(tiny_data.labels_csv(split), tiny_data.images_dir(split))
    samples = [(dataset.path(i), int(dataset.labels[i])) for i in range(len(dataset))]
    return write_shards(samples, root / split, shard_size=shard_size)


@pytest.fixture(scope="module")
def shards(tiny_data, tmp_path_factory):
    """24 training samples in shards of 5, 5, 5, 5, 4; the validation split likewise."""
    root = tmp_path_factory.mktemp("shards")
    for split in ("train", "val"):
        _write(tiny_data, root, split)
    return root


def _argv(shards, snapshot, *extra) -> list[str]:
    return ["--tiny", "--shards", str(shards / "train"), "--val-shards", str(shards / "val"),
            "--equalize", "none", "--snapshot", str(snapshot), *extra]


def _train(shards, snapshot, *extra) -> list[dict]:
    return shard_train.train(shard_train.parse_args(_argv(shards, snapshot, *extra)))


@pytest.fixture(scope="module")
def ended(shards, tmp_path_factory):
    """A snapshot of a run that ended after its one epoch, and the snapshot's bytes."""
    snapshot = tmp_path_factory.mktemp("ended") / "snap.pt"
    _train(shards, snapshot, "--num-epochs", "1")
    return snapshot, snapshot.read_bytes()


def _model(path) -> dict[str, torch.Tensor]:
    return read_snapshot(path)["model"]


def test_extending_an_ended_run_gives_the_uninterrupted_weights(shards, ended, tmp_path,
                                                                capsys):
    extended = tmp_path / "extended.pt"
    extended.write_bytes(ended[1])
    whole = tmp_path / "whole.pt"
    uninterrupted = _train(shards, whole, "--num-epochs", "2")
    capsys.readouterr()
    resumed = _train(shards, extended, "--num-epochs", "2", "--out", str(tmp_path / "run.json"))
    assert f"resumed from {extended} after epoch 1 of 1; --num-epochs 1 -> 2 extends the run" \
        in capsys.readouterr().out
    assert [record["epoch"] for record in resumed] == [1]
    assert resumed[0]["train_loss"] == uninterrupted[1]["train_loss"]
    mine, reference = _model(extended), _model(whole)
    assert all(torch.equal(mine[name], reference[name]) for name in reference)
    assert read_snapshot(extended)["epoch"] == 2
    assert json.loads((tmp_path / "run.json").read_text())["epochs"][0]["epoch"] == 1


def test_resuming_an_ended_run_trains_nothing_and_says_so(shards, ended, capsys):
    snapshot, good = ended
    assert _train(shards, snapshot, "--num-epochs", "1") == []
    assert "the run has ended: nothing to train" in capsys.readouterr().out
    assert snapshot.read_bytes() == good


def test_resume_with_other_settings_is_refused_naming_each(shards, ended, capsys):
    snapshot, good = ended
    argv = _argv(shards, snapshot, "--num-epochs", "1", "--lr", "0.01", "--seed", "3",
                 "--batch-size", "2", "--allow-duplicate-keys")
    assert shard_train.main(argv) == 1
    err = capsys.readouterr().err
    assert "--allow-duplicate-keys False -> True; --batch-size 4 -> 2; --lr 0.003 -> 0.01; " \
           "--seed 0 -> 3. Resume with the snapshot's values" in err
    assert ("may change on resume: --max-steps, --num-epochs, --num-workers, --out, --snapshot, "
            "--snapshot-every, --tiny") in err
    assert snapshot.read_bytes() == good


def test_a_shorter_run_than_the_snapshot_is_refused(shards, tmp_path):
    snapshot = tmp_path / "snap.pt"
    _train(shards, snapshot)  # --tiny: 2 epochs
    with pytest.raises(SnapshotError, match=r"--num-epochs 1: snapshot .*snap\.pt is already at "
                                            r"step 12 \(epoch 2, batch 0\), past the end of 1"):
        _train(shards, snapshot, "--num-epochs", "1")


def test_resume_on_other_shards_is_refused_naming_each(tiny_data, shards, tmp_path, capsys):
    data = tmp_path / "shards"
    shutil.copytree(shards, data)
    snapshot = tmp_path / "snap.pt"
    _train(data, snapshot, "--num-epochs", "1")
    good = snapshot.read_bytes()
    _write(tiny_data, data, "train", shard_size=6)  # same samples, other shards, same folder
    capsys.readouterr()
    assert shard_train.main(_argv(data, snapshot, "--num-epochs", "2")) == 1
    err = capsys.readouterr().err
    assert "was written by a run on other data (snapshot -> now): --shards shard-000000.tar " \
           "sha256 " in err
    assert "--shards shard-000004.tar missing. Resume on the snapshot's data" in err
    assert "--val-shards" not in err and snapshot.read_bytes() == good


def test_a_repacked_shard_added_is_refused_unless_allowed(shards, tmp_path, capsys):
    data = tmp_path / "shards"
    shutil.copytree(shards / "val", data / "val")
    (data / "train").mkdir()
    first = data / "train" / "shard-000000.tar"
    repacked = repack(shards / "train" / first.name, data / "train" / "shard-000005.tar")
    with_extra_shard(shards / "train" / "manifest.json", data / "train", repacked)
    argv = ["--tiny", "--shards", str(data / "train"), "--val-shards", str(data / "val"),
            "--equalize", "none", "--num-epochs", "1"]
    assert shard_train.main(argv) == 1
    err = capsys.readouterr().err
    assert f"sample key '00000000' is in shard {first} and again in shard {repacked}" in err
    history = shard_train.train(shard_train.parse_args([*argv, "--allow-duplicate-keys"]))
    assert history[0]["samples_per_rank"] == [29]  # oversampling, as asked


def test_the_flags_are_documented(capsys):
    with pytest.raises(SystemExit):
        shard_train.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--allow-duplicate-keys" in text and "oversampling on purpose" in text
    assert "--snapshot SNAPSHOT" in text and "resumed from if it exists" in text


def test_a_snapshot_path_that_cannot_be_one_is_an_argparse_error(tmp_path, capsys):
    same = str(tmp_path / "same.pt")
    for argv, flag in ((["--snapshot", str(tmp_path)], "--snapshot"),
                       (["--snapshot", same, "--out", same], "--out")):
        with pytest.raises(SystemExit) as exit_info:
            shard_train.parse_args(["--tiny", *argv])
        assert exit_info.value.code == 2 and flag in capsys.readouterr().err


def test_workers_outputs_and_length_may_change_on_resume(shards, ended, tmp_path):
    snapshot, _ = ended
    config = shard_train.parse_args(_argv(shards, tmp_path / "elsewhere.pt", "--num-epochs", "3",
                                          "--num-workers", "2", "--out", str(tmp_path / "o.json")))
    identity = {f"{flag} {path.name}": file_sha256(path) for flag, split in
                (("--shards", "train"), ("--val-shards", "val"))
                for path in sorted((shards / split).glob("*.tar"))}
    assert check_resume(snapshot, read_snapshot(snapshot), asdict(config),
                        may_change=shard_train.RESUME_MAY_CHANGE, identity=identity)  # 1 -> 3


def test_a_run_stopped_mid_epoch_resumes_to_the_uninterrupted_weights(shards, tmp_path, capsys):
    """--tiny trains 2 epochs of 6 steps (24 samples, batch 4), augmented per sample; a run
    stopped after step 4 resumes from its snapshot mid-epoch, reading only the rest (with
    DataLoader workers and 2 ranks: tests/system/test_shard_train.py)."""
    whole = tmp_path / "whole.pt"
    _train(shards, whole, "--equalize", "pad")
    stopped = tmp_path / "stopped.pt"
    _train(shards, stopped, "--equalize", "pad", "--snapshot-every", "3", "--max-steps", "4")
    saved = read_snapshot(stopped)
    assert (saved["epoch"], saved["step"], saved["batch_in_epoch"]) == (0, 4, 4)
    state = json.loads(shard_train.data_state_path(stopped).read_text())["4"]
    assert state["consumed"] == [16] and state["epoch"] == 0
    history = _train(shards, stopped, "--equalize", "pad")
    assert "in epoch 0 after step 4 (16 samples of each rank read)" in capsys.readouterr().out
    assert [epoch["samples_per_rank"] for epoch in history] == [[8], [24]]  # the rest, then all
    for name, tensor in _model(whole).items():
        assert torch.equal(tensor, _model(stopped)[name]), name


def test_a_mid_epoch_snapshot_without_its_shard_position_is_refused(shards, tmp_path):
    stopped = tmp_path / "stopped.pt"
    _train(shards, stopped, "--equalize", "pad", "--max-steps", "2")
    shard_train.data_state_path(stopped).unlink()
    with pytest.raises(ValueError, match="no shard position for step 2"):
        _train(shards, stopped, "--equalize", "pad")
