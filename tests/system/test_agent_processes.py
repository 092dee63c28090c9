"""tests/speedups/agent.py: the forking agent that some system tests launch returns, fails and times
out as the learner's launch does (``common.ddp.launch.run_command`` of ``torchrun_command``'s
``python -m common.ddp.torchrun``)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
import pytest

from common.ddp.launch import run_command
from tests.speedups.agent import forking_command

#: A worker script: prints its rank and whether it was forked from an agent that imported pandas; with an
#: argument, rank 1 fails (``fail``) or every rank writes its pid and sleeps (``sleep``).
JOB = """import os, sys, time
print("rank", os.environ["RANK"], "pandas preloaded:", "pandas" in sys.modules, flush=True)
if sys.argv[1:] == ["fail"] and os.environ["RANK"] == "1":
    sys.exit(3)
if sys.argv[1:] == ["sleep"]:
    open(os.path.join(os.path.dirname(__file__), "pid-" + os.environ["RANK"]), "w").write(str(os.getpid()))
    time.sleep(120)
"""


@pytest.fixture
def job(tmp_path) -> Path:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    return script


def test_the_workers_are_forked_with_the_libraries_and_their_status_comes_back(job):
    done = run_command(forking_command(str(job), nproc_per_node=2), timeout=120)
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("rank")) == [
        "rank 0 pandas preloaded: True", "rank 1 pandas preloaded: True"]
    with pytest.raises(RuntimeError, match="exited with 1") as failed:
        run_command(forking_command(str(job), ["fail"], nproc_per_node=2), timeout=120)
    assert "rank 1: exited with code 3 (its output above says why)" in str(failed.value), \
        "the launcher's line for the failed rank comes back"
    assert "Traceback" not in str(failed.value), "nor the agent's ChildFailedError traceback"


def test_a_timeout_kills_the_agent_and_its_workers(job):
    with pytest.raises(subprocess.TimeoutExpired):
        run_command(forking_command(str(job), ["sleep"], nproc_per_node=2), timeout=15)
    pids = [int(p.read_text()) for p in sorted(job.parent.glob("pid-*"))]
    assert len(pids) == 2, "both workers started before the timeout"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids), "no worker outlives the timeout"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
