"""Forking torchrun's agent under ``make test``: what it preloads, and a fork server for the agent itself.

``python -m common.ddp.agent`` (the entry point) imports ``PRELOAD`` before torchrun's agent forks its
workers, so that no worker imports them again. Under ``make test`` a notebook launches many such jobs
(chapter 4.2 about ten), and each agent would still start a Python and import them once more:
``run_forked`` forks the agent itself from a ``multiprocessing`` fork server that imported them once for
the calling process (its first launch pays for it), and runs the entry point there as ``python -m``
would. ``common.ddp.launch.run_command`` uses it for that agent's command lines only
(``common/quick.py``); a learner's launch starts every agent and worker fresh.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import psutil

#: What the workers of this repository's entry points import beyond torch, loaded in the agent.
PRELOAD = ("numpy", "pandas", "PIL.Image", "torchvision.transforms.v2")
#: The entry point the fork server runs.
AGENT = "common.ddp.agent"


def preload_libraries() -> None:
    """Import ``PRELOAD`` into this process, so that the processes it forks start with it."""
    for name in PRELOAD:
        importlib.import_module(name)


def _agent_main(argv: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """In a child of the fork server: ``python -m common.ddp.agent argv`` in ``cwd`` with ``env``,
    its output (and its workers') into the files ``out`` and ``err``."""
    for fd, path in ((1, out), (2, err)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [AGENT, *argv]
    try:
        runpy.run_module(AGENT, run_name="__main__", alter_sys=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _stop(pid: int) -> None:
    """SIGKILL the agent ``pid`` and its workers (torchrun starts them in sessions of their own)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        agent = psutil.Process(pid)
        for process in [*agent.children(recursive=True), agent]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def run_forked(argv: Sequence[str], *, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run([python, "-m", "common.ddp.agent", *argv], capture_output=True, text=True,
    env=env, timeout=timeout)``, the agent forked from this process's fork server (module doc).

    Raises:
        subprocess.TimeoutExpired: After ``timeout`` seconds, once the agent and its workers are killed.
    """
    args = [sys.executable, "-m", AGENT, *argv]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, "torch.distributed.run"])  # read when the server starts
    with tempfile.TemporaryDirectory(prefix="agent-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        agent = context.Process(target=_agent_main, args=(list(argv), dict(env), os.getcwd(), str(out), str(err)))
        agent.start()
        agent.join(timeout)
        if agent.exitcode is None:
            _stop(agent.pid)
            agent.join()
            raise subprocess.TimeoutExpired(args, timeout, out.read_text(errors="replace"),
                                            err.read_text(errors="replace"))
        code = agent.exitcode if agent.exitcode >= 0 else 128 - agent.exitcode
        return subprocess.CompletedProcess(args, code, out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))
