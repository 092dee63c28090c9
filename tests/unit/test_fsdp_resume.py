"""Tests for common/fsdp/resume.py through ``common.fsdp.train.main`` in this process (world
size 1, no process group): every refusal of the resume contract names its culprit and leaves
the checkpoint as it was; what may change (``--num-epochs``) resumes to DDP's weights.

The run: 24 images, global batch 12, 2 steps per epoch, 2 epochs, AdamW; the checkpoint of
the fixture ``stopped`` is at step 3 (epoch 1, batch 1: mid-epoch, with a loader state).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import socket
from contextlib import redirect_stdout
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch
from torch.utils.data import DataLoader

from common.ddp.optim import build_optimizer, build_scheduler
from common.ddp.process_group import DistInfo
from common.ddp.train import main as ddp_main
from common.fsdp.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_manifest,
    save_checkpoint,
)
from common.fsdp.config import parse_config
from common.fsdp.loader import stateful_loader
from common.fsdp.resume import check_extra
from common.fsdp.train import build_model, main
from common.synthetic import SyntheticConfig, ensure_data

ONE_PROCESS = DistInfo(0, 0, 1, torch.device("cpu"), None, False)
DATA = SyntheticConfig(seed=7, num_train=24, num_val=12, min_size=40, max_size=64)


@pytest.fixture(scope="module")
def data24(tmp_path_factory):
    return ensure_data(tmp_path_factory.mktemp("fsdp_resume") / "shapes", DATA, verbose=False)


def _args(data_root, out: Path, *extra: str) -> list[str]:
    return ["--tiny", "--subset", "24", "--data", str(data_root), "--checkpoint", str(out / "ckpt"),
            "--log-file", str(out / "log.jsonl"), "--save-final", str(out / "final.pt"), *extra]


def _main(argv: list[str]) -> int:
    with redirect_stdout(io.StringIO()):  # the JSON lines go to the log file as well
        return main(argv)


def _records(out: Path, event: str) -> list[dict]:
    lines = (out / "log.jsonl").read_text().splitlines() if (out / "log.jsonl").exists() else []
    return [r for r in map(json.loads, lines) if r["event"] == event]


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def stopped_once(data24, tmp_path_factory):
    """A run stopped by --max-steps 3: checkpoints of steps 2 and 3."""
    out = tmp_path_factory.mktemp("stopped")
    assert _main(_args(data24.root, out, "--max-steps", "3")) == 0
    return out


@pytest.fixture
def stopped(stopped_once, tmp_path):
    """A private copy of ``stopped_once``'s checkpoint folder (tests may damage it)."""
    shutil.copytree(stopped_once / "ckpt", tmp_path / "ckpt")
    return tmp_path


@pytest.mark.parametrize(("flags", "named"), [
    (("--batch-size", "6"), "--batch-size 12 -> 6"),
    (("--seed", "5"), "--seed 0 -> 5"),
    (("--lr", "0.1", "--weight-decay", "0.01"), "--lr 0.003 -> 0.1; --weight-decay 0.0005 -> 0.01"),
    (("--grad-accum", "2"), "--grad-accum 1 -> 2"),
    (("--subset", "12"), "--subset 24 -> 12"),
])
def test_resume_with_other_settings_is_refused_naming_each(data24, stopped, capsys, flags, named):
    before = _digest(stopped / "ckpt")
    capsys.readouterr()
    assert _main(_args(data24.root, stopped, *flags)) == 2
    err = capsys.readouterr().err
    assert f"step-000003 was written by a run with other settings (checkpoint -> now): {named}." \
        in err
    assert "another --checkpoint path; may change on resume: --async-save" in err
    assert _digest(stopped / "ckpt") == before and not _records(stopped, "resume")


def test_other_data_is_refused_naming_the_folder_or_the_file(data24, tmp_path, capsys):
    mine, other = tmp_path / "mine", tmp_path / "other"
    shutil.copytree(data24.root, mine)
    ensure_data(other, SyntheticConfig(**{**DATA.__dict__, "seed": 8}), verbose=False)
    assert _main(_args(mine, tmp_path, "--max-steps", "1")) == 0
    capsys.readouterr()
    assert _main(_args(other, tmp_path)) == 2  # another folder of the same size
    assert f"--data '{mine}' -> '{other}'" in capsys.readouterr().err
    labels = mine / "train" / "labels.csv"
    header, first, second, *rest = labels.read_text().splitlines(keepends=True)
    labels.write_text("".join([header, second, first, *rest]))  # same size, two labels swapped
    assert _main(_args(mine, tmp_path)) == 2
    err = capsys.readouterr().err
    assert "written by a run on other data (checkpoint -> now): --data train/labels.csv sha256" \
        in err and "val/labels.csv" not in err


def test_an_ended_run_is_extended_like_ddp_and_not_cut_short(data24, tmp_path, capsys):
    # The same run under both trainers (GroupNorm, AdamW, no augmentation): 2 epochs, then
    # resumed with --num-epochs 4; the schedule is rebuilt for 4 epochs at step 4 by both.
    same = ["--batch-size", "12", "--lr", "0.003", "--optimizer", "adamw", "--no-augment",
            "--width", "4", "--image-size", "32", "--subset", "24", "--data", str(data24.root)]
    fsdp, ddp = tmp_path / "fsdp", tmp_path / "ddp"
    for epochs in ("2", "4"):
        assert _main(_args(data24.root, fsdp, "--num-epochs", epochs)) == 0
        with redirect_stdout(io.StringIO()):
            assert ddp_main(["--tiny", *same, "--norm", "group", "--num-epochs", epochs,
                             "--snapshot", str(ddp / "snap.pt"),
                             "--save-final", str(ddp / "final.pt")]) == 0
    resumed = _records(fsdp, "resume")[-1]
    assert (resumed["num_epochs"], resumed["step"], resumed["loader"]) == ([2, 4], 4, "new epoch")
    assert "--num-epochs 2 -> 4 extends the run, which had ended after epoch 2" in \
        capsys.readouterr().err
    assert _records(fsdp, "done")[-1]["step"] == 8
    expected = torch.load(ddp / "final.pt", weights_only=True)
    actual = torch.load(fsdp / "final.pt", weights_only=True)
    for key, value in expected.items():
        torch.testing.assert_close(actual[key], value, rtol=1.3e-6, atol=1e-5, msg=key)
    assert _main(_args(data24.root, fsdp, "--num-epochs", "3")) == 2  # step 8 is past 3 epochs
    assert "--num-epochs 3: checkpoint" in capsys.readouterr().err


def test_a_bit_flipped_in_the_newest_checkpoint_is_refused_naming_the_file(data24, stopped,
                                                                           capsys):
    shard = stopped / "ckpt" / "step-000003" / "__0_0.distcp"
    stat = shard.stat()
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40  # one bit; size and mtime kept
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    before = _digest(stopped / "ckpt")
    capsys.readouterr()
    assert _main(_args(data24.root, stopped)) == 2
    assert f"{shard}: its bytes are not those written at step 3" in capsys.readouterr().err
    assert _digest(stopped / "ckpt") == before


def test_a_file_of_an_earlier_step_swapped_in_is_refused(data24, stopped, capsys):
    ckpt = stopped / "ckpt"
    shutil.copy(ckpt / "step-000002" / "__0_0.distcp", ckpt / "step-000003" / "__0_0.distcp")
    capsys.readouterr()
    assert _main(_args(data24.root, stopped)) == 2
    assert "step-000003/__0_0.distcp: its bytes are not those written at step 3" in \
        capsys.readouterr().err


def test_checkpoints_of_two_runs_in_one_folder_are_refused(data24, stopped, tmp_path, capsys):
    other = tmp_path / "other"
    assert _main(_args(data24.root, other, "--seed", "1", "--max-steps", "4")) == 0
    shutil.copytree(other / "ckpt" / "step-000004", stopped / "ckpt" / "step-000004")
    capsys.readouterr()
    assert _main(_args(data24.root, stopped)) == 2
    err = capsys.readouterr().err
    assert "holds checkpoints of 2 runs: step-000003 (run" in err and "step-000004 (run" in err


def _resave(data24, path: Path, change) -> None:
    """Rewrite the checkpoint ``path`` with ``change(extra)`` applied (new, valid digests)."""
    config = parse_config(_args(data24.root, path.parent.parent))
    model = build_model(config, ONE_PROCESS, len(data24.classes))
    optimizer = build_optimizer(config, model)
    template = {"position": {"epoch": 0, "step": 0, "batch_in_epoch": 0},
                "scheduler": build_scheduler(config, optimizer, 4).state_dict(),
                "rng": torch.get_rng_state(), "loader": {"rank0": b""}}
    extra = load_checkpoint(path, model=model, optimizer=optimizer, extra=template)
    change(extra)
    manifest = read_manifest(path)
    save_checkpoint(path.parent, manifest.step, model=model, optimizer=optimizer, extra=extra,
                    run=manifest.run)


@pytest.mark.parametrize("samples", [0, 36])
def test_a_loader_state_that_disagrees_with_the_position_is_refused(data24, stopped, capsys,
                                                                    samples):
    def claim(extra):
        state = pickle.loads(extra["loader"]["rank0"])
        state["_sampler_iter_state"]["samples_yielded"] = samples
        extra["loader"]["rank0"] = pickle.dumps(state)

    _resave(data24, stopped / "ckpt" / "step-000003", claim)
    capsys.readouterr()
    assert _main(_args(data24.root, stopped)) == 2
    assert (f"step-000003: the loader state of rank 0 is refused: it says {samples} samples "
            "were yielded, but 1 batches x 12 samples make 12") in capsys.readouterr().err
    assert not _records(stopped, "resume")


def _loader_state(batches: int) -> dict:
    loader = stateful_loader(DataLoader(torch.arange(48.0).view(48, 1), batch_size=6))
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    return loader.state_dict()


@pytest.mark.parametrize(("edit", "message"), [
    ({"samples_yielded": 0}, "it says 0 samples were yielded, but 2 batches x 6 samples make 12"),
    ({"samples_yielded": 36}, "it says 36 samples were yielded, but 2 batches x 6 samples make "
                              "12"),
    ({"_num_yielded": 3}, "it says 3 batches were yielded, the checkpoint's position is 2"),
    ({"broken": True}, "it is not a StatefulDataLoader state"),
])
def test_check_extra_refuses_a_loader_state_off_the_position(tmp_path, edit, message):
    state = _loader_state(2)
    if "samples_yielded" in edit:
        state["_sampler_iter_state"]["samples_yielded"] = edit["samples_yielded"]
    elif "_num_yielded" in edit:
        state["_num_yielded"] = edit["_num_yielded"]
    else:
        state = {"not": "a loader state"}
    position = {"epoch": 1, "step": 3, "batch_in_epoch": 2}
    extra = {"position": dict(position), "loader": {"rank0": pickle.dumps(state)}}
    loader = SimpleNamespace(batch_size=6, num_workers=0)
    with pytest.raises(CheckpointError, match=f"the loader state of rank 0 is refused: {message}"):
        check_extra(tmp_path, extra, position=position, info=ONE_PROCESS, loader=loader)
    good = {"position": dict(position), "loader": {"rank0": pickle.dumps(_loader_state(2))}}
    assert check_extra(tmp_path, good, position=position, info=ONE_PROCESS,
                       loader=loader)["_num_yielded"] == 2
    moved = {**good, "position": {**position, "step": 4}}
    with pytest.raises(CheckpointError, match="its files hold the position"):
        check_extra(tmp_path, moved, position=position, info=ONE_PROCESS, loader=loader)


def test_a_second_writer_is_refused_naming_the_first_and_a_stale_lock_is_taken_over(
        data24, stopped, capsys):
    lock = stopped / "ckpt" / "writer.lock"
    me = {"pid": os.getppid(), "host": socket.gethostname(), "run_id": "abc123", "job": "",
          "started": psutil.Process(os.getppid()).create_time()}  # a live process: the parent
    lock.write_text(json.dumps(me))
    capsys.readouterr()
    assert _main(_args(data24.root, stopped)) == 2
    err = capsys.readouterr().err
    assert f"another run writes checkpoints here: pid {os.getppid()} on" in err
    assert "run abc123" in err and "One writer per checkpoint folder" in err
    assert not _records(stopped, "resume") and lock.exists()
    lock.write_text(json.dumps({**me, "started": me["started"] - 100}))  # that pid, reused
    assert _main(_args(data24.root, stopped)) == 0
    assert "took over the stale lock" in capsys.readouterr().err
    assert _records(stopped, "resume")[-1]["step"] == 3 and not lock.exists()
