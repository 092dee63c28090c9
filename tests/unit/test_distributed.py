"""Tests for common/distributed.py: samplers, launch helpers, the collectives under torchrun."""

from __future__ import annotations

import os
import socket

import pytest
import torch
from torch.utils.data import DistributedSampler

from common.cli import one_line
from common.ddp import launch
from common.ddp.collectives_demo import allreduce_seconds, fastest_ms
from common.ddp.launch import (
    free_port,
    launch_env,
    restart_safe_environment,
    torchrun_command,
    worker_entry,
)
from common.ddp.process_group import (
    DistInfo,
    all_reduce_sum,
    gather_objects,
    is_main_process,
    run_in_process_group,
    setup_distributed,
)
from common.ddp.samplers import ResumableDistributedSampler, ShardSampler


@pytest.mark.parametrize(("size", "world_size"), [(13, 2), (13, 3), (4, 4), (2, 3)])
def test_shard_sampler_counts_every_sample_exactly_once(size, world_size):
    shards = [list(ShardSampler(size, rank=r, world_size=world_size)) for r in range(world_size)]
    assert sorted(i for shard in shards for i in shard) == list(range(size))
    assert [len(ShardSampler(size, rank=r, world_size=world_size)) for r in range(world_size)] \
        == [len(shard) for shard in shards]


def test_distributed_sampler_pads_with_duplicates_which_shard_sampler_avoids():
    padded = [i for r in range(2) for i in DistributedSampler(range(13), 2, r, shuffle=False)]
    assert len(padded) == 14 and len(set(padded)) == 13  # torch repeats one sample
    with pytest.raises(ValueError, match="rank must lie in 0..1"):
        ShardSampler(13, rank=2, world_size=2)


@pytest.mark.parametrize("start", [0, 1, 5, 12])
def test_resumable_sampler_continues_the_same_order(start):
    dataset = range(25)
    reference = DistributedSampler(dataset, num_replicas=2, rank=1, seed=3, drop_last=True)
    resumable = ResumableDistributedSampler(dataset, num_replicas=2, rank=1, seed=3,
                                            drop_last=True)
    reference.set_epoch(4)
    resumable.set_epoch(4, start=start)
    assert list(resumable) == list(reference)[start:]
    assert len(resumable) == 12 - start
    resumable.set_epoch(5)  # the next epoch starts from its beginning again
    reference.set_epoch(5)
    assert list(resumable) == list(reference)
    with pytest.raises(ValueError, match="start must lie in 0..12"):
        resumable.set_epoch(5, start=13)


def test_without_torchrun_one_process_and_no_group(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    info = setup_distributed(device_type="cpu")
    assert (info.rank, info.world_size, info.initialized, is_main_process()) == (0, 1, False, True)
    assert is_main_process()
    values = torch.tensor([1.0, 2.0])
    summed = all_reduce_sum(values)
    assert torch.equal(summed, values) and summed is not values
    assert gather_objects({"a": 1}) == [{"a": 1}]


def test_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 1024 <= port < 65536


def test_torchrun_command_forms():
    single = torchrun_command("common.x", ["--a", "1"], nproc_per_node=2)
    assert single[1:] == ["-m", "common.ddp.torchrun", "--nproc-per-node=2", "--standalone",
                          "-m", "common.x", "--a", "1"]
    multi = torchrun_command("common.x", nproc_per_node=1, nnodes=2, rdzv_endpoint="127.0.0.1:1234",
                             rdzv_id="j", max_restarts=1)
    assert "--nnodes=2" in multi and "--rdzv-endpoint=127.0.0.1:1234" in multi
    assert "--rdzv-backend=c10d" in multi and "--max-restarts=1" in multi
    with pytest.raises(ValueError, match="needs an rdzv_endpoint"):
        torchrun_command("common.x", nnodes=2)
    env = launch_env(threads=1)
    assert env["OMP_NUM_THREADS"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in env, "the launcher sets it when it may restart"
    assert env["PYTHONUNBUFFERED"] == "1", "each line a rank prints arrives at once, as python -u would"
    assert env["COMPANION_LAUNCH_STARTER"] == str(os.getpid()), "the launcher ends with this process"


def test_only_a_launch_that_may_restart_gets_a_store_per_attempt():
    environ: dict[str, str] = {}
    restart_safe_environment(0, environ)
    assert environ == {}, "without restarts the workers share the agent's store"
    restart_safe_environment(2, environ)
    assert environ == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    chosen = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}
    restart_safe_environment(1, chosen)
    assert chosen == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}, "a value already set is kept"


def test_a_script_is_run_by_path_and_a_module_with_m(tmp_path):
    assert worker_entry("collectives.py", ["--repeats", "3"]) == ["collectives.py", "--repeats", "3"]
    assert worker_entry(tmp_path / "x.py") == [str(tmp_path / "x.py")]
    assert worker_entry("common.ddp.train", ["--tiny"]) == ["-m", "common.ddp.train", "--tiny"]


def test_an_expected_error_is_one_line_even_when_a_worker_raised_it(monkeypatch, capsys):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    reraised = ("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent "
                "call last):\n  File \"x.py\", line 1, in <module>\nValueError: labels.csv row 7: "
                "label 9 is out of range")

    def train(config, info):
        raise ValueError(reraised)

    assert run_in_process_group(train, None, errors=(ValueError,)) == 2
    assert capsys.readouterr().err == "rank 0: error: ValueError: labels.csv row 7: label 9 is out of range\n"
    assert one_line("plain message") == "plain message"


def test_allreduce_seconds_times_every_size_each_round_without_a_group():
    info = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend=None,
                    initialized=False)
    seconds = allreduce_seconds(info, (4, 16), repeats=3)
    assert list(seconds) == [4, 16] and all(len(t) == 3 and min(t) >= 0 for t in seconds.values())


def test_the_cost_line_reports_the_fastest_call_of_each_size():
    assert fastest_ms({256: [0.003, 0.001, 0.002], 4096: [0.0025]}) == "256:1.000 4096:2.500"


def test_a_rendezvous_that_cannot_be_made_is_one_line_naming_the_port(monkeypatch, capsys):
    """MASTER_PORT taken by another program: EADDRINUSE from the TCPStore, once a 30-line traceback."""
    from common.ddp import process_group

    def taken():
        raise torch.distributed.DistNetworkError("The server socket has failed to listen on any local network "
                                                 "address. port: 29500, name: EADDRINUSE")

    monkeypatch.setattr(process_group, "setup_distributed", taken)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("RANK", "0")
    assert run_in_process_group(lambda config, info: None, None, errors=(ValueError,)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "MASTER_ADDR:MASTER_PORT 127.0.0.1:29500" in err and "EADDRINUSE" in err


class _FakeLibc:
    """Stands in for the C library, so that no test sets a parent-death signal on pytest itself."""

    def __init__(self, returns: int = 0) -> None:
        self.calls: list[tuple[int, ...]] = []
        self.returns = returns

    def prctl(self, *args: int) -> int:
        self.calls.append(args)
        return self.returns


def _fake_libc(monkeypatch, returns: int = 0) -> _FakeLibc:
    import ctypes

    libc = _FakeLibc(returns)
    monkeypatch.setattr(ctypes, "CDLL", lambda *_, **__: libc)
    monkeypatch.setattr(launch.sys, "platform", "linux")
    return libc


def test_a_launch_started_by_a_process_ends_with_it_on_linux(monkeypatch):
    """The signal is asked for once, SIGTERM (torchrun's agent stops its workers on it), and the
    variable is removed, so the ranks do not inherit it (the real signal: the system test)."""
    import signal

    libc = _fake_libc(monkeypatch)
    environ = {launch.STARTER_ENV: str(os.getppid()), "OTHER": "1"}  # the launcher's parent
    assert launch.end_with_starter(environ) is True
    assert libc.calls == [(1, signal.SIGTERM, 0, 0, 0)] and environ == {"OTHER": "1"}


def test_without_a_starter_or_off_linux_nothing_is_set_up(monkeypatch):
    libc = _fake_libc(monkeypatch)
    assert launch.end_with_starter({}) is False  # a launch from a terminal: nohup keeps working
    monkeypatch.setattr(launch.sys, "platform", "darwin")
    environ = {launch.STARTER_ENV: str(os.getppid())}
    assert launch.end_with_starter(environ) is False and environ == {}
    assert libc.calls == []


def test_a_starter_that_is_not_the_parent_was_passed_on_and_sets_up_nothing(monkeypatch):
    """A shell that did not exec, a batch job's exported environment on another machine: the pid
    means nothing here, so the launch neither fails nor ends with some other process."""
    libc = _fake_libc(monkeypatch)
    environ = {launch.STARTER_ENV: str(os.getpid())}  # this process: never the launcher's parent
    assert launch.end_with_starter(environ) is False and environ == {} and libc.calls == []


def test_a_parent_that_ends_while_the_signal_is_set_up_stops_the_launch_in_one_line(monkeypatch):
    """It died before the signal was set up (this process was given to another parent), so the
    signal would never come."""
    libc = _fake_libc(monkeypatch)
    parents = iter([4242, 1])  # the starter, then init after it ended
    monkeypatch.setattr(launch.os, "getppid", lambda: next(parents))
    with pytest.raises(SystemExit) as raised:
        launch.end_with_starter({launch.STARTER_ENV: "4242"})
    assert str(raised.value) == f"error: the process that started this launch ({launch.STARTER_ENV}=4242) has ended"
    assert len(libc.calls) == 1


def test_a_starter_that_is_no_process_id_stops_the_launch_in_one_line(monkeypatch):
    libc = _fake_libc(monkeypatch)
    with pytest.raises(SystemExit) as raised:
        launch.end_with_starter({launch.STARTER_ENV: "kernel"})
    assert str(raised.value) == f"error: {launch.STARTER_ENV} must be a process id, got 'kernel'"
    assert libc.calls == []


def test_a_failed_prctl_stops_the_launch_in_one_line(monkeypatch):
    _fake_libc(monkeypatch, returns=-1)
    with pytest.raises(SystemExit, match=r"^error: prctl\(PR_SET_PDEATHSIG\) failed: "):
        launch.end_with_starter({launch.STARTER_ENV: str(os.getppid())})
