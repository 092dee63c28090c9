"""Tests for common/shards/train.py: DDP training from uneven shards never hangs."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from common.data import CustomImageDataset
from common.ddp.snapshot import read_snapshot
from common.shards import train as shard_train
from common.shards import write_shards
from tests.system.forked_ranks import forked_ranks_command, run_forked


@pytest.fixture(scope="module")
def tiny_shards(tiny_data, tmp_path_factory):
    """Train shards of 5, 5, 5, 5, 4 samples: with 2 ranks one gets 3 shards, the other 2."""
    root = tmp_path_factory.mktemp("shards")
    for split in ("train", "val"):
        dataset = CustomImageDataset(tiny_data.labels_csv(split), tiny_data.images_dir(split))
        samples = [(dataset.path(i), int(dataset.labels[i])) for i in range(len(dataset))]
        write_shards(samples, root / split, shard_size=5)
    return root


def test_single_process_run(tiny_shards):
    config = shard_train.parse_args(["--tiny", "--shards", str(tiny_shards / "train"),
                                     "--val-shards", str(tiny_shards / "val"), "--equalize", "none"])
    history = shard_train.train(config)
    assert len(history) == 2
    assert [epoch["samples_per_rank"] for epoch in history] == [[24], [24]]
    assert all(0.0 <= epoch["val_acc"] <= 1.0 for epoch in history)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["pad", "drop"])
def test_two_ranks_uneven_shards_equal_batches(tiny_shards, tmp_path, policy):
    out, snapshot = tmp_path / "run.json", tmp_path / "snap.pt"
    # Two ranks forked from one interpreter (tests/system/forked_ranks.py: torchrun's variables
    # without its agent; the shards' arithmetic is the subject here, not the launcher).
    # A rank that runs out of batches first would leave the other waiting forever: on a
    # timeout, the launch and its ranks are killed.
    try:
        done = run_forked(forked_ranks_command("common.shards.train", [
            "--tiny", "--shards", str(tiny_shards / "train"), "--val-shards", str(tiny_shards / "val"),
            "--equalize", policy, "--out", str(out), "--snapshot", str(snapshot)], nproc=2),
            timeout=180, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"2 ranks with equalize={policy!r} did not finish in 180 s (hang?)")
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(out.read_text())
    assert run["world_size"] == 2 and len(run["epochs"]) == 2
    for epoch in run["epochs"]:
        batches, samples = epoch["batches_per_rank"], epoch["samples_per_rank"]
        assert batches[0] == batches[1] > 0 and samples[0] == samples[1]
        assert sum(samples) > 24 if policy == "pad" else sum(samples) < 24
    assert "batches per rank" in done.stdout
    saved = read_snapshot(snapshot)  # written by rank 0, with both ranks' RNG states
    assert saved["epoch"] == 2 and len(saved["rng"]) == 2
    assert sorted(saved["identity"])[0] == "--shards shard-000000.tar"


@pytest.mark.slow
def test_two_ranks_stopped_mid_epoch_resume_on_other_workers_to_the_same_weights(tiny_shards,
                                                                                 tmp_path):
    """2 ranks, batch 4 per rank, pad: an epoch of 4 steps (the third one short). Stopped after
    step 2 with 2 DataLoader workers per rank, resumed with none: the uninterrupted run's
    weights. (The next epoch would follow the new plan's order: one epoch is compared.)"""
    def launch(snapshot, *extra):
        done = run_forked(forked_ranks_command("common.shards.train", [
            "--tiny", "--shards", str(tiny_shards / "train"), "--val-shards",
            str(tiny_shards / "val"), "--snapshot", str(snapshot), "--num-epochs", "1", *extra],
            nproc=2),
            timeout=240, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    whole, stopped = tmp_path / "whole.pt", tmp_path / "stopped.pt"
    launch(whole, "--num-workers", "2")
    launch(stopped, "--num-workers", "2", "--max-steps", "2")
    assert read_snapshot(stopped)["batch_in_epoch"] == 2
    out = launch(stopped, "--num-workers", "0")
    assert "in epoch 0 after step 2 (8, 8 samples of each rank read)" in out
    for name, tensor in read_snapshot(whole)["model"].items():
        assert torch.equal(tensor, read_snapshot(stopped)["model"][name]), name


def test_a_training_rank_imports_no_pandas():
    """pandas is about 0.3 s of CPU to import, and only the chapters' tables and the benchmarks use it:
    neither trainer's module may pull it into every rank (``ShardedImageDataset.plan`` imports it
    when called)."""
    import sys

    code = ("import sys, common.ddp.train, common.shards.train\n"
            "print(sorted(name for name in ('pandas', 'matplotlib') if name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]
