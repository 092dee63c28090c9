"""Tests for common/fsdp/train.py: FSDP equals one process, memory, resharding, restarts,
``--compile``, ``--async-save``, the ``StatefulDataLoader`` state in the checkpoint; the resume
contract on 2 ranks and an elastic guest with other settings (the rest: tests/unit/test_fsdp_*).

Multi-process tests run on the CPU with the gloo backend: forked ranks, or torchrun's agent for
restarts and agents (its workers forked: tests/speedups/agent.py), each forked from an interpreter
that imported torch once (tests/system/forked_ranks.py).
The tiny run: 48 images, global batch 12, 4 steps per epoch, 2 epochs, AdamW.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest
import torch

from common.ddp.launch import free_port
from common.fsdp.checkpoint import (
    async_save_checkpoint,
    checkpoint_dirs,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from common.fsdp.config import TINY, parse_config
from common.fsdp.elastic import agents_env, elastic_command, read_log
from common.fsdp.train import main
from common.synthetic import SyntheticConfig, ensure_data
from tests.speedups.agent import forked_workers
from tests.system.forked_ranks import launch, popen

RTOL, ATOL = 1.3e-6, 1e-5  # float32 tolerances of PyTorch's own distributed tests


@pytest.fixture(scope="module")
def data48(tmp_path_factory):
    config = SyntheticConfig(seed=7, num_train=48, num_val=24, min_size=40, max_size=64)
    return ensure_data(tmp_path_factory.mktemp("fsdp") / "shapes", config, verbose=False)


def _args(data, out, *extra) -> list[str]:
    # ImageNet's statistics: with the data's own (--normalize auto) the compiled and eager runs
    # drift apart by 3e-5 in 8 steps, past the float32 tolerances these comparisons use.
    return ["--tiny", "--data", str(data.root), "--save-final", str(out / "final.pt"),
            "--log-file", str(out / "log.jsonl"), "--checkpoint", str(out / "ckpt"),
            "--normalize", "imagenet", *extra]


def _records(out, event: str) -> list[dict]:
    lines = (out / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def _assert_close(out, reference, **tolerance) -> None:
    actual = torch.load(out / "final.pt", weights_only=True)
    expected = torch.load(reference / "final.pt", weights_only=True)
    assert actual.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], **tolerance, msg=key)


def _torchrun(data, out, *extra, nproc: int = 2, max_restarts: int = 0) -> None:
    """N ranks of common.fsdp.train: forked from one interpreter (tests/system/forked_ranks.py)
    unless the test is about restarts (``max_restarts``), which need torchrun's agent."""
    launch("common.fsdp.train", _args(data, out, *extra), nproc=nproc, max_restarts=max_restarts)


@pytest.fixture(scope="module")
def one_process(data48, tmp_path_factory):
    """The reference: one plain process, global batch 12, 8 optimizer steps."""
    out = tmp_path_factory.mktemp("one")
    assert main(_args(data48, out)) == 0
    return out


@pytest.fixture(scope="module")
def two_ranks(data48, tmp_path_factory):
    """FSDP on 2 ranks, compiled, a checkpoint every 3 steps and at epoch ends (written with
    dcp.async_save), all kept. (Plain FSDP without either: the 3-rank and the restart tests.)"""
    out = tmp_path_factory.mktemp("two")
    _torchrun(data48, out, "--checkpoint-every", "3", "--keep", "9", "--compile", "--async-save")
    return out


def test_a_run_stopped_by_max_steps_saves_its_last_step_once(data48, tmp_path):
    """--checkpoint-every 2 --max-steps 2: the step that both stops and saves is written once, not twice."""
    assert main(_args(data48, tmp_path, "--checkpoint-every", "2", "--max-steps", "2")) == 0
    assert [r["step"] for r in _records(tmp_path, "checkpoint")] == [2]
    assert main(_args(data48, tmp_path / "three", "--checkpoint-every", "2", "--max-steps", "3")) == 0
    assert [r["step"] for r in _records(tmp_path / "three", "checkpoint")] == [2, 3], "a step between saves"


def test_tiny_preset_and_flags_given_win():
    config = parse_config(["--tiny", "--batch-size", "6"])
    assert config.batch_size == 6 and config.subset == TINY["subset"]
    with pytest.raises(SystemExit):
        parse_config(["--kill-in-save"])  # needs --simulate-kill-at-step


@pytest.mark.slow
def test_compiled_fsdp_on_two_ranks_equals_one_process(two_ranks, one_process):
    assert _records(two_ranks, "done")[-1]["step"] == 8
    assert _records(two_ranks, "start")[0]["config"]["compile"]
    _assert_close(two_ranks, one_process, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_async_saves_are_published_after_they_complete(two_ranks):
    published = _records(two_ranks, "checkpoint")
    assert [r["step"] for r in published] == [3, 4, 6, 8]
    assert all(r["blocking_s"] >= 0 and r["wait_s"] >= 0 for r in published)
    assert [p.name for p in checkpoint_dirs(two_ranks / "ckpt")] == [
        f"step-{step:06d}" for step in (3, 4, 6, 8)]
    assert not list((two_ranks / "ckpt").glob(".*"))  # no hidden folder left behind


def test_compile_in_one_process_equals_eager(data48, one_process, tmp_path):
    try:
        assert main(_args(data48, tmp_path, "--compile", "--checkpoint", "")) == 0
    finally:
        torch._dynamo.reset()  # leave no compiled code behind in this test process
    _assert_close(tmp_path, one_process, rtol=RTOL, atol=ATOL)


def test_async_save_publishes_on_wait_and_a_crash_before_leaves_the_last(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    save_checkpoint(tmp_path, 1, model=model, optimizer=optimizer)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    pending = async_save_checkpoint(tmp_path, 2, model=model, optimizer=optimizer)
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on: the save has its own copy (staging)
    pending.future.result()  # written, not yet published: a crash now leaves step 1
    assert latest_checkpoint(tmp_path).name == "step-000001"
    assert pending.wait().name == "step-000002" == latest_checkpoint(tmp_path).name
    fresh = torch.nn.Linear(4, 3)
    load_checkpoint(latest_checkpoint(tmp_path), model=fresh,
                    optimizer=torch.optim.SGD(fresh.parameters(), lr=0.1))
    assert all(torch.equal(fresh.state_dict()[k], saved[k]) for k in saved)

    def crash(_tmp):
        raise KeyboardInterrupt  # dies after writing, before publishing
    with pytest.raises(KeyboardInterrupt):
        async_save_checkpoint(tmp_path, 3, model=model, optimizer=optimizer, on_written=crash).wait()
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step-000001", "step-000002"]


@pytest.mark.slow
def test_fsdp_holds_at_most_0_6_of_ddp_bytes_per_rank(data48, two_ranks, tmp_path):
    # (--strategy ddp --compile also equals one process, but compiling DDP's bucketed graphs
    # costs ~35 s with a cold compile cache: too much for this suite.)
    _torchrun(data48, tmp_path, "--strategy", "ddp", "--max-steps", "1", "--checkpoint", "")
    ddp = _records(tmp_path, "done")[-1]["bytes_per_rank"]
    fsdp = _records(two_ranks, "done")[-1]["bytes_per_rank"]
    assert len(ddp) == len(fsdp) == 2
    for ddp_rank, fsdp_rank in zip(ddp, fsdp, strict=True):
        assert fsdp_rank["gradients"] > 0 and fsdp_rank["optimizer"] > 0
        assert fsdp_rank["total"] <= 0.6 * ddp_rank["total"], (fsdp_rank, ddp_rank)


@pytest.mark.slow
def test_checkpoint_of_two_ranks_continues_on_one_and_on_three(data48, two_ranks, one_process,
                                                               tmp_path):
    for name in ("on1", "on3"):
        (tmp_path / name / "ckpt").mkdir(parents=True)
        shutil.copytree(two_ranks / "ckpt" / "step-000006", tmp_path / name / "ckpt" / "step-000006")
    assert main(_args(data48, tmp_path / "on1")) == 0
    _torchrun(data48, tmp_path / "on3", nproc=3)
    for name, world_size in (("on1", 1), ("on3", 3)):
        resumed = _records(tmp_path / name, "resume")
        # Another world size: the per-rank loader states do not apply; the position does.
        assert [(r["step"], r["world_size"], r["loader"]) for r in resumed] == [
            (6, world_size, "sampler position")]
        _assert_close(tmp_path / name, one_process, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_sigkill_in_a_save_restarts_from_the_previous_checkpoint(data48, one_process, tmp_path):
    # The last rank SIGKILLs itself inside the save at the end of epoch 1 (step 4): written,
    # never published. The restart resumes from step 3, mid-epoch, on the same 2 ranks: with
    # each rank's StatefulDataLoader state.
    _torchrun(data48, tmp_path, "--checkpoint-every", "3", "--simulate-kill-at-step", "4",
              "--kill-in-save", max_restarts=1)
    assert [r["where"] for r in _records(tmp_path, "simulated_kill")] == ["in_save"]
    resumed = _records(tmp_path, "resume")
    assert [(r["attempt"], r["step"], r["loader"]) for r in resumed] == [(1, 3, "loader state")]
    assert [p.name for p in checkpoint_dirs(tmp_path / "ckpt")] == ["step-000006", "step-000008"]
    assert not list((tmp_path / "ckpt").glob(".*.tmp"))
    _assert_close(tmp_path, one_process, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_two_rank_resume_refuses_other_settings_on_every_rank_and_allows_workers(
        data48, two_ranks, one_process, tmp_path):
    # The step-6 checkpoint of 2 ranks (mid-epoch 2, each rank's loader state in it), resumed
    # on 2 ranks: with --seed 5 both ranks refuse before anything is loaded (none hangs in a
    # collective); with --num-workers 2 the saved states (of loaders without workers) are
    # not used, the position is, and the run ends at the uninterrupted weights.
    (tmp_path / "ckpt").mkdir()
    shutil.copytree(two_ranks / "ckpt" / "step-000006", tmp_path / "ckpt" / "step-000006")
    with pytest.raises(RuntimeError) as refused:
        _torchrun(data48, tmp_path, "--seed", "5")
    for rank in (0, 1):
        assert f"rank {rank}: error: checkpoint {tmp_path / 'ckpt' / 'step-000006'} was " \
            "written by a run with other settings (checkpoint -> now): --seed 0 -> 5" \
            in str(refused.value)
    assert not (tmp_path / "log.jsonl").exists() or not _records(tmp_path, "resume")
    _torchrun(data48, tmp_path, "--num-workers", "2")
    assert [(r["step"], r["loader"]) for r in _records(tmp_path, "resume")] == [
        (6, "sampler position")]
    _assert_close(tmp_path, one_process, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_an_elastic_guest_with_other_settings_is_refused_by_name_not_hung(data48, tmp_path):
    # The host agent runs alone (world size 1); after its step-1 checkpoint a guest agent
    # joins with --seed 5. The new group of 2 checks its ranks' settings first thing: both
    # ranks stop, naming the flag, and both agents exit (max-restarts 0) within the timeout.
    # (join_later's steps, with agents forked from tests/system/forked_ranks.py's server.)
    options = {"endpoint": f"127.0.0.1:{free_port()}", "max_restarts": 0}
    host_args = _args(data48, tmp_path, "--checkpoint-every", "1", "--step-delay", "3")
    guest_args = [*host_args, "--seed", "5"]
    host, guest = (forked_workers(elastic_command("common.fsdp.train", args, **options),
                                  "common.fsdp.train", args) for args in (host_args, guest_args))
    env, log = agents_env([host, guest]), tmp_path / "log.jsonl"
    agents = [popen(host, stderr=subprocess.STDOUT, env=env)]
    try:
        deadline = time.monotonic() + 150
        while not any(r["event"] == "checkpoint" and r["step"] >= 1 for r in read_log(log)):
            assert agents[0].poll() is None and time.monotonic() < deadline, \
                agents[0].output()[0][-3000:]  # the host ended (or hung) before step 1
            time.sleep(0.05)
        agents.append(popen(guest, stderr=subprocess.STDOUT, env=env))
        outputs = [agent.communicate(timeout=150)[0] for agent in agents]  # else: hung
    finally:
        for agent in agents:
            agent.kill()
    assert all(agent.returncode != 0 for agent in agents), outputs
    output = "\n".join(outputs)
    assert "the ranks of this job were started with other settings than rank 0" in output
    assert re.search(r"--seed (0 / 5|5 / 0)", output), output[-3000:]
    assert [r["world_size"] for r in _records(tmp_path, "start")] == [1]  # no group of 2 trained
