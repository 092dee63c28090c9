"""Tests for common/ddp/train.py: equivalence, no_sync, resume, restart, multi-node, bad input.

Multi-process tests run on the CPU with the gloo backend: forked ranks, or torchrun's agent for
restarts and agents (its workers forked: tests/speedups/agent.py), each forked from an interpreter
that imported torch once (tests/system/forked_ranks.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import psutil
import pytest
import torch

from common.ddp.config import TINY, TrainConfig, parse_config
from common.ddp.data import build_loaders
from common.ddp.launch import free_port
from common.ddp.optim import build_scheduler, rebuild_scheduler
from common.ddp.process_group import DistInfo
from common.ddp.train import main
from common.synthetic import SyntheticConfig, ensure_data
from common.transforms import IMAGENET_STD
from tests.speedups.agent import forking_command
from tests.system.forked_ranks import launch, popen

RTOL, ATOL = 1.3e-6, 1e-5  # float32 tolerances of PyTorch's own DDP tests


@pytest.fixture(scope="module")
def data13(tmp_path_factory):
    """24 training images and an odd number (13) of validation images."""
    config = SyntheticConfig(seed=7, num_train=24, num_val=13, min_size=40, max_size=64)
    return ensure_data(tmp_path_factory.mktemp("ddp") / "shapes", config, verbose=False)


def _args(data, out, *extra) -> list[str]:
    return ["--tiny", "--data", str(data.root), "--save-final", str(out / "final.pt"),
            "--log-file", str(out / "log.jsonl"), *extra]


def _records(out, event: str) -> list[dict]:
    lines = (out / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def _weights(out) -> dict[str, torch.Tensor]:
    return torch.load(out / "final.pt", weights_only=True)


def _assert_close(actual: dict, expected: dict, **tolerance) -> None:
    assert actual.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], **tolerance, msg=key)


@pytest.fixture(scope="module")
def one_process(data13, tmp_path_factory):
    """The reference: one plain process, global batch 8, 6 optimizer steps."""
    out = tmp_path_factory.mktemp("one")
    assert main(_args(data13, out)) == 0
    return out


def test_tiny_fills_in_only_what_no_flag_gives():
    config = parse_config(["--tiny", "--num-epochs", "5", "--no-augment", "--norm", "batch"])
    assert (config.num_epochs, config.augment, config.norm) == (5, False, "batch")
    assert config.batch_size == TINY["batch_size"] != TrainConfig().batch_size
    with pytest.raises(SystemExit):
        parse_config(["--norm", "layer"])


def test_one_process_counts_every_sample_once(one_process):
    epochs = _records(one_process, "epoch")
    assert [r["val_count"] for r in epochs] == [13, 13]
    assert [r["train_count"] for r in epochs] == [24, 24]
    assert _records(one_process, "done")[0]["step"] == 6


def test_batch_that_does_not_split_is_refused(data13, tmp_path, capsys):
    assert main(_args(data13, tmp_path, "--batch-size", "9", "--grad-accum", "2")) == 2
    assert "--batch-size 9 must be a multiple of world_size (1) x --grad-accum (2)" in \
        capsys.readouterr().err


def test_resume_mid_epoch_equals_uninterrupted_run(data13, one_process, tmp_path):
    snapshot = str(tmp_path / "snap.pt")
    assert main(_args(data13, tmp_path, "--snapshot", snapshot, "--max-steps", "4")) == 0
    stopped = _records(tmp_path, "snapshot")[-1]
    assert (stopped["epoch"], stopped["step"], stopped["batch_in_epoch"]) == (1, 4, 1)
    assert main(_args(data13, tmp_path, "--snapshot", snapshot)) == 0
    assert _records(tmp_path, "resume")[0]["step"] == 4
    _assert_close(_weights(tmp_path), _weights(one_process), rtol=0, atol=0)


def test_bad_snapshots_are_refused_and_left_alone(data13, tmp_path, capsys):
    snapshot = tmp_path / "snap.pt"
    assert main(_args(data13, tmp_path, "--snapshot", str(snapshot), "--max-steps", "1")) == 0
    good = snapshot.read_bytes()
    assert main(_args(data13, tmp_path, "--snapshot", str(snapshot), "--width", "8")) == 2
    assert "other settings (snapshot -> now): --width 4 -> 8" in capsys.readouterr().err
    snapshot.write_bytes(good[: len(good) // 2])
    assert main(_args(data13, tmp_path, "--snapshot", str(snapshot))) == 2
    assert "truncated or not a PyTorch file" in capsys.readouterr().err
    assert snapshot.read_bytes() == good[: len(good) // 2]


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--num-epochs", "-1", "--num-epochs: must be at least 1, got -1"),
    ("--batch-size", "0", "--batch-size: must be at least 1, got 0"),
    ("--width", "0", "--width: must be at least 1, got 0"),
    ("--image-size", "0", "--image-size: must be at least 1, got 0"),
    ("--max-steps", "-3", "--max-steps: must be 0 or more, got -3"),
])
def test_bad_flags_are_argparse_errors_naming_the_flag(flag, value, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--tiny", flag, value])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_unwritable_output_paths_are_refused_at_start(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    for flag in ("--snapshot", "--save-final", "--log-file"):
        with pytest.raises(SystemExit) as exit_info:
            parse_config(["--tiny", flag, str(blocker / "snap.pt")])
        assert exit_info.value.code == 2
        assert f"{flag}: cannot create {blocker / 'snap.pt'}: {blocker} is not a folder" in \
            capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(["--snapshot", str(tmp_path)])
    assert "is a folder, not a file" in capsys.readouterr().err
    assert parse_config(["--snapshot", str(tmp_path / "new" / "deeper" / "snap.pt")])


@pytest.fixture
def stopped(data13, tmp_path):
    """A snapshot taken mid-epoch 1, after optimizer step 4 (batch 8), and its bytes."""
    snapshot = tmp_path / "snap.pt"
    assert main(_args(data13, tmp_path, "--snapshot", str(snapshot), "--max-steps", "4")) == 0
    return snapshot, snapshot.read_bytes()


def test_resume_with_other_settings_is_refused_naming_each(data13, stopped, tmp_path, capsys):
    snapshot, good = stopped
    capsys.readouterr()
    assert main(_args(data13, tmp_path, "--snapshot", str(snapshot), "--lr", "0.1",
                      "--seed", "3")) == 2
    err = capsys.readouterr().err
    assert "--lr 0.05 -> 0.1; --seed 0 -> 3. Resume with the snapshot's values" in err
    assert "may change on resume: --count-allreduces, --log-file, --max-steps, --num-epochs" in err
    assert snapshot.read_bytes() == good


def test_mid_epoch_resume_with_another_batch_size_is_refused(data13, stopped, tmp_path, capsys):
    snapshot, good = stopped
    assert main(_args(data13, tmp_path, "--snapshot", str(snapshot), "--batch-size", "16")) == 2
    assert "--batch-size 8 -> 16" in capsys.readouterr().err
    assert snapshot.read_bytes() == good and len(_records(tmp_path, "resume")) == 0


def test_resume_may_change_num_epochs_and_workers(data13, stopped, tmp_path, capsys):
    snapshot, _ = stopped
    assert main(_args(data13, tmp_path, "--snapshot", str(snapshot), "--num-epochs", "1")) == 2
    err = capsys.readouterr().err
    assert "--num-epochs 1: snapshot" in err and "already at step 4" in err
    assert main(_args(data13, tmp_path, "--snapshot", str(snapshot), "--num-epochs", "3",
                      "--num-workers", "1")) == 0
    assert _records(tmp_path, "resume")[-1]["num_epochs"] == [2, 3]
    assert [r["epoch"] for r in _records(tmp_path, "epoch")][-2:] == [2, 3]
    assert _records(tmp_path, "done")[-1]["step"] == 9  # 3 epochs x 3 steps


@pytest.mark.parametrize("schedule", ["cosine", "onecycle"])
def test_rebuilt_schedule_is_where_a_longer_plan_would_be(schedule):
    config = parse_config(["--schedule", schedule, "--lr", "0.1"])

    def planned(steps: int, total: int) -> torch.optim.Optimizer:
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=config.lr,
                                    momentum=0.9)
        scheduler = build_scheduler(config, optimizer, total_steps=total)
        for _ in range(steps):
            optimizer.step()
            scheduler.step()
        return optimizer

    optimizer = planned(7, total=12)  # a shorter plan, stopped at step 7
    scheduler = rebuild_scheduler(config, optimizer, total_steps=20, step=7)
    expected = planned(7, total=20).param_groups[0]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(expected["lr"])
    assert optimizer.param_groups[0]["momentum"] == pytest.approx(expected["momentum"])
    for _ in range(13):  # and it runs to the new end without error
        optimizer.step()
        scheduler.step()


def test_onecycle_warms_up_to_the_peak_and_anneals():
    config = parse_config(["--schedule", "onecycle", "--lr", "0.1"])
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=config.lr)
    scheduler = build_scheduler(config, optimizer, total_steps=20)
    lrs = []
    for _ in range(20):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] < 0.1 * config.lr and lrs[-1] < 0.01 * config.lr
    assert max(lrs) == pytest.approx(config.lr) and 3 <= lrs.index(max(lrs)) <= 8


def test_onecycle_run_resumes_exactly(data13, one_process, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(_args(data13, full, "--schedule", "onecycle")) == 0
    snapshot = str(part / "snap.pt")
    assert main(_args(data13, part, "--schedule", "onecycle", "--snapshot", snapshot,
                      "--max-steps", "4")) == 0
    assert main(_args(data13, part, "--schedule", "onecycle", "--snapshot", snapshot)) == 0
    _assert_close(_weights(part), _weights(full), rtol=0, atol=0)
    cosine = _weights(one_process)
    assert any(not torch.equal(_weights(full)[k], cosine[k]) for k in cosine)


def _torchrun(data, out, *extra, nproc=2, max_restarts=0) -> subprocess.CompletedProcess:
    """N ranks of common.ddp.train: forked from one interpreter (tests/system/forked_ranks.py)
    unless the test is about restarts, which need torchrun's agent."""
    return launch("common.ddp.train", _args(data, out, *extra), nproc=nproc,
                  max_restarts=max_restarts)


@pytest.fixture(scope="module")
def two_ranks(data13, tmp_path_factory):
    out = tmp_path_factory.mktemp("two")
    _torchrun(data13, out, "--count-allreduces")
    return out


@pytest.mark.slow
def test_two_ranks_equal_one_process(two_ranks, one_process):
    done = _records(two_ranks, "done")[0]
    assert (done["world_size"], done["step"]) == (2, 6)
    assert done["allreduce_syncs"] == 6  # one gradient all-reduce per optimizer step
    assert [r["val_count"] for r in _records(two_ranks, "epoch")] == [13, 13]
    _assert_close(_weights(two_ranks), _weights(one_process), rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_grad_accumulation_with_no_sync(data13, one_process, tmp_path):
    _torchrun(data13, tmp_path, "--grad-accum", "2", "--count-allreduces")
    done = _records(tmp_path, "done")[0]
    # 12 micro-batches per rank, 6 optimizer steps: 6 all-reduces, not 12.
    assert (done["step"], done["allreduce_syncs"]) == (6, 6)
    _assert_close(_weights(tmp_path), _weights(one_process), rtol=RTOL, atol=ATOL)


def _wait_for(predicate, process, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert process.poll() is None, "the run ended before the awaited event"
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.02)


def _worker(agent, local_rank: int) -> psutil.Process:
    """The agent's worker of ``local_rank``. Forked workers carry the agent's command line and
    environment, so they are told apart by start order: torchrun starts local ranks 0, 1, ...
    one after the other (the test checks afterwards that torchrun names the same pid)."""
    workers = sorted(psutil.Process(agent.pid).children(), key=lambda child: child.pid)
    assert len(workers) == 2, workers
    return workers[local_rank]


@pytest.mark.slow
def test_sigkilled_worker_restarts_from_snapshot(data13, two_ranks, tmp_path):
    args = _args(data13, tmp_path, "--snapshot", str(tmp_path / "snap.pt"),
                 "--snapshot-every", "2", "--step-delay", "0.4")
    # Workers forked from an agent that imported their libraries (tests/speedups/agent.py).
    agent = popen(forking_command("common.ddp.train", args, max_restarts=1),
                  stderr=subprocess.STDOUT)
    log = tmp_path / "log.jsonl"
    _wait_for(lambda: log.exists() and '"event": "snapshot"' in log.read_text(), agent)
    victim = _worker(agent, 1)
    victim.send_signal(signal.SIGKILL)  # mid-epoch 1, right after step 2
    output, _ = agent.communicate(timeout=120)
    assert agent.returncode == 0, output[-3000:]
    assert f"local_rank: 1 (pid: {victim.pid})" in output, output[-3000:]  # the one killed
    resumed = _records(tmp_path, "resume")
    assert len(resumed) == 1 and resumed[0]["attempt"] == 1
    assert resumed[0]["step"] in (2, 4) and resumed[0]["batch_in_epoch"] > 0  # mid-epoch
    assert _records(tmp_path, "done")[-1]["step"] == 6
    _assert_close(_weights(tmp_path), _weights(two_ranks), rtol=0, atol=0)


@pytest.mark.slow
def test_two_agents_on_loopback_train_together(data13, one_process, tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    agents = [popen(forking_command("common.ddp.train", _args(data13, tmp_path), nproc_per_node=1,
                                    nnodes=2, rdzv_endpoint=endpoint, rdzv_id="loopback"),
                    stderr=subprocess.STDOUT)
              for _node in range(2)]
    outputs = [agent.communicate(timeout=120)[0] for agent in agents]
    for agent, output in zip(agents, outputs, strict=True):
        assert agent.returncode == 0, output[-3000:]
    assert _records(tmp_path, "start")[0]["world_size"] == 2
    _assert_close(_weights(tmp_path), _weights(one_process), rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_resume_mid_epoch_on_another_number_of_ranks(data13, one_process, tmp_path):
    # 1 process stops after step 4 (mid-epoch 1); 2 ranks finish: the samples consumed so far are
    # a prefix of the epoch's shuffled order on any number of ranks, so the result is the same.
    snapshot = str(tmp_path / "snap.pt")
    assert main(_args(data13, tmp_path, "--snapshot", snapshot, "--max-steps", "4")) == 0
    _torchrun(data13, tmp_path, "--snapshot", snapshot)
    resumed = _records(tmp_path, "resume")[-1]
    assert (resumed["step"], resumed["batch_in_epoch"]) == (4, 1)
    assert _records(tmp_path, "done")[-1]["step"] == 6
    _assert_close(_weights(tmp_path), _weights(one_process), rtol=RTOL, atol=ATOL)


def test_cache_pipeline_gives_the_decode_batches_up_to_uint8_rounding(data13):
    """``--data-pipeline cache`` (Chapter 3's uint8 cache) = Chapter 2's pipeline, rounded."""
    info = DistInfo(0, 0, 2, torch.device("cpu"), None, False)  # rank 0 of 2: a half-batch each
    decode = parse_config(["--tiny", "--no-augment", "--data", str(data13.root)])
    cache = parse_config(["--tiny", "--no-augment", "--data", str(data13.root),
                          "--data-pipeline", "cache"])
    step = 1 / (255 * min(IMAGENET_STD))  # one uint8 level, normalized
    for expected, got in zip(build_loaders(decode, info, data13), build_loaders(cache, info, data13),
                             strict=True):
        assert len(expected) == len(got)
        for (images, labels), (cached, cached_labels) in zip(expected, got, strict=True):
            assert cached.dtype == torch.float32 and torch.equal(labels, cached_labels)
            torch.testing.assert_close(cached, images, rtol=0, atol=step * 1.001)
    assert (data13.root.parent / "cache" / "train_32" / "manifest.json").is_file()


def test_cache_pipeline_trains_and_refuses_augmentation(data13, tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_config(["--tiny", "--data-pipeline", "cache"])  # TINY augments
    assert "--data-pipeline: cache stores eval crops" in capsys.readouterr().err
    assert main(_args(data13, tmp_path, "--data-pipeline", "cache", "--no-augment")) == 0
    epochs = _records(tmp_path, "epoch")
    assert [r["train_count"] for r in epochs] == [24, 24] and [r["val_count"] for r in epochs] == [13, 13]
