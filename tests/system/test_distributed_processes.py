"""Tests for common.ddp: the collectives and the device plan under torchrun — the tests that start processes (the rest: tests/unit/test_distributed.py, tests/unit/test_device_plan.py)."""

from __future__ import annotations

import sys

import pytest

from common.ddp.launch import torchrun_command
from tests.system.forked_ranks import run_forked


@pytest.mark.slow
def test_collectives_on_two_processes_and_companion_device_reaches_the_workers(monkeypatch):
    """One torchrun launch for both: the collectives' results, and the device plan that
    COMPANION_DEVICE=cpu makes every rank follow (the plan's cases: tests/unit/test_device_plan.py)."""
    monkeypatch.setenv("COMPANION_DEVICE", "cpu")
    # `torchrun -m` with a fresh Python per worker, as a learner's run starts them. The agent itself
    # is forked from tests/system/forked_ranks.py's server, which imported torch already.
    done = run_forked(torchrun_command("common.ddp.collectives_demo", nproc_per_node=2), timeout=180)
    lines = done.stdout.splitlines()
    identity = lines[lines.index("== identity") + 1:][:2]
    assert all("backend=gloo device=cpu" in line for line in identity), identity
    plan_line = ("device plan: 2 ranks on this host, COMPANION_DEVICE=cpu -> every rank on cpu "
                 "with gloo")
    assert done.stderr.splitlines().count(plan_line) == 1, done.stderr[-2000:]
    section = {title: lines[i + 1: i + 3] for i, title in enumerate(lines) if title.startswith("==")}
    assert "  rank 0: before=1" in lines and "  rank 1: before=2" in lines
    assert lines.count("  rank 0: after=3") == 1 and lines.count("  rank 1: after=3") == 1
    assert section["== broadcast from rank 0"] == ["  rank 0: [42.0, 7.0]", "  rank 1: [42.0, 7.0]"]
    gathered = "[[0.0, 1.0], [10.0, 11.0]]"
    assert section["== all_gather"] == [f"  rank 0: {gathered}", f"  rank 1: {gathered}"]
    assert all(line.endswith("True") for line in section["== barrier"])
    ddp = section["== DDP gradient of my half == gradient of the whole batch"]
    assert len(ddp) == 2 and all(": True (max diff" in line for line in ddp)
    assert "world_size=2 backend=gloo" in section["== identity"][1]
    cost = section["== all_reduce milliseconds by tensor size (float32 values)"]
    assert len(cost) == 2 and all(len(line.split(": ", 1)[1].split()) == 6 for line in cost)


def test_the_workers_share_the_agent_s_store_unless_the_launch_may_restart(tmp_path):
    """Without restarts the ranks connect to the agent's rendezvous store, up before they start (a
    store of their own, served by rank 0, makes a rank that comes first retry after a pause); with
    ``--max-restarts`` each attempt gets a store of its own (pytorch/pytorch#135712)."""
    worker = tmp_path / "worker.py"
    worker.write_text("import os\n"
                      "print(os.environ['RANK'], os.environ['TORCHELASTIC_USE_AGENT_STORE'], "
                      "os.environ.get('TORCH_DISABLE_SHARE_RDZV_TCP_STORE'))\n")
    plain = run_forked(torchrun_command(str(worker), nproc_per_node=2), timeout=120)
    assert sorted(plain.stdout.split("\n")[:2]) == ["0 True None", "1 True None"], plain.stdout
    restarting = run_forked(torchrun_command(str(worker), nproc_per_node=2, max_restarts=1), timeout=120)
    assert sorted(restarting.stdout.split("\n")[:2]) == ["0 False 1", "1 False 1"], restarting.stdout


def _ended(pid: int, within: float = 5.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie: killed, not yet reaped) within ``within`` s."""
    import time

    import psutil

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_timed_out_command_ends_with_what_it_started_in_a_session_of_its_own(tmp_path):
    """As torchrun starts its workers: ``setsid``, out of the launcher's process group."""
    import subprocess

    from common.ddp.launch import run_command

    pid_file = tmp_path / "pid"
    script = f"setsid sleep 60 & echo $! > {pid_file}; wait"
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_command(["bash", "-c", script], timeout=2)
    assert raised.value.timeout == 2 and isinstance(raised.value.stdout, str)
    assert _ended(int(pid_file.read_text())), "the command's own session outlived the timeout"


def _sleeping_launch(folder, pids) -> list[str]:
    """A 2-rank torchrun command (``common.ddp.torchrun``) whose workers write their pids to the
    folder ``pids`` (made here), one file per rank, then sleep for 300 s."""
    worker = folder / "worker.py"
    worker.write_text("import os, pathlib, sys, time\n"
                      "pathlib.Path(sys.argv[1], os.environ['RANK']).write_text(str(os.getpid()))\n"
                      "time.sleep(300)\n")
    pids.mkdir()
    return [sys.executable, "-m", "common.ddp.torchrun", "--nproc-per-node=2", "--standalone",
            str(worker), str(pids)]


@pytest.mark.slow
def test_an_interrupted_launch_leaves_no_worker_running(tmp_path):
    """The notebook's stop button (``KeyboardInterrupt``) during ``run_command``: torchrun's
    workers end with it (they run in sessions of their own, which killing torchrun alone misses).
    The interrupt comes as a real signal once both workers run, as the kernel's does."""
    import os
    import signal
    import threading
    import time

    import psutil

    from common.ddp.launch import run_command

    pids = tmp_path / "pids"
    command = _sleeping_launch(tmp_path, pids)
    running_when_interrupted: list[bool] = []

    def interrupt_when_both_run() -> None:
        deadline = time.monotonic() + 120
        while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # both pid files written in full
        running_when_interrupted.extend(psutil.pid_exists(int(path.read_text()))
                                        for path in pids.iterdir())
        os.kill(os.getpid(), signal.SIGUSR1)

    def stop(*_) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, stop)
    try:
        threading.Thread(target=interrupt_when_both_run, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_command(command, timeout=240)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert running_when_interrupted == [True, True], "both workers ran when the interrupt came"
    started = [int(path.read_text()) for path in pids.iterdir()]
    assert [pid for pid in started if not _ended(pid)] == []


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_kernel_takes_its_launch_along(tmp_path):
    """A kernel restarted mid-launch is SIGKILLed with its process group, as jupyter_client's
    restart does: nothing of the kernel runs to stop the launch, yet torchrun and both workers end
    (torchrun runs in a session of its own, out of that group; ``launch_env`` names the kernel as
    its starter, so it gets SIGTERM and stops its workers). The controls, run by hand: with
    ``STARTER_ENV`` renamed in the kernel all three ran on, and with torchrun in the kernel's
    group its workers did (a real ipykernel restarted by jupyter_client behaved the same)."""
    import os
    import signal
    import subprocess
    import time

    import psutil

    pids = tmp_path / "pids"
    command = _sleeping_launch(tmp_path, pids)
    kernel_code = "import sys\nfrom common.ddp import launch\nlaunch.run_command(sys.argv[1:], timeout=240)\n"
    kernel = subprocess.Popen([sys.executable, "-c", kernel_code, *command], start_new_session=True)
    started: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # both pid files written in full
        started = [child.pid for child in psutil.Process(kernel.pid).children()]
        started += [int(path.read_text()) for path in pids.iterdir()]
        assert len(started) == 3, f"torchrun and its two workers: {started}"
        os.killpg(kernel.pid, signal.SIGKILL)  # jupyter_client: the kernel's whole process group
        kernel.wait()
        assert [pid for pid in started if not _ended(pid, within=30)] == []
    finally:
        if kernel.poll() is None:
            kernel.kill()
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
