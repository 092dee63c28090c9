"""Run an entry point's ``main`` on N ranks forked from one process that imported it once.

``python -m tests.system.forked_ranks MODULE NPROC ARGS...`` gives each rank what
``torchrun --standalone --nproc-per-node=NPROC`` gives its workers (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, a free ``MASTER_PORT``, restart count 0),
calls ``MODULE.main(ARGS)`` in each, and exits with the first failing rank's status after
stopping the others, as torchrun's agent does. What it leaves out is the agent: one interpreter
imports torch and the trainer instead of three (an agent and two workers), which is most of a
tiny run's cost. The tests whose subject is the training arithmetic (equal weights on 1 and N
ranks, accumulation, resuming on another world size, refusals) launch through this; the tests of
restarts, rendezvous and agents launch real ``torchrun``.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence

from common.ddp.agent import preload
from common.ddp.launch import free_port, torchrun_command

#: Seconds the other ranks get to stop on their own after one failed, and after SIGTERM.
GRACE = 5.0


def forked_ranks_command(module: str, args: Sequence[str] = (), *, nproc: int = 2) -> list[str]:
    """The command line that runs ``module.main(args)`` on ``nproc`` forked ranks."""
    return [sys.executable, "-m", "tests.system.forked_ranks", module, str(nproc), *args]


def launch_command(module: str, args: Sequence[str] = (), *, nproc: int = 2,
                   max_restarts: int = 0) -> list[str]:
    """Forked ranks for a run that cannot fail over; ``torchrun`` (its agent restarts the group)
    for one that may (``max_restarts > 0``)."""
    if max_restarts:
        return torchrun_command(module, args, nproc_per_node=nproc, max_restarts=max_restarts)
    return forked_ranks_command(module, args, nproc=nproc)


def rank_env(rank: int, nproc: int, port: int) -> dict[str, str]:
    """The variables torchrun --standalone sets for worker ``rank`` of ``nproc``."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
            "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "ROLE_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": "forked-ranks"}


def _run_rank(entry: Callable[[list[str]], int | None], args: list[str], env: dict[str, str]) -> int:
    os.environ.update(env)
    try:
        code = entry(args) or 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - a rank's crash is its exit status, as under torchrun
        traceback.print_exc()
        code = 1
    return code


def _reap(pids: set[int], seconds: float) -> None:
    """Wait up to ``seconds`` for ``pids`` to exit, removing each that did."""
    deadline = time.monotonic() + seconds
    while pids and time.monotonic() < deadline:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            pids.discard(pid)
        else:
            time.sleep(0.05)


def _stop(pids: set[int]) -> None:
    """After one rank failed: let the others finish what they print (a refusal of their own),
    then SIGTERM, then SIGKILL, as torchrun's agent stops a failed group."""
    _reap(pids, GRACE)
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            os.kill(pid, signum)
        _reap(pids, GRACE)


def run(module: str, nproc: int, args: list[str]) -> int:
    """Fork ``nproc`` ranks of ``module.main(args)``; the first nonzero status, else 0. The ranks
    start with what torchrun's forking agent preloads (``common.ddp.agent``) imported already."""
    preload()
    entry = importlib.import_module(module).main
    port = free_port()
    sys.stdout.flush()
    sys.stderr.flush()
    pids = set()
    for rank in range(nproc):
        pid = os.fork()
        if pid == 0:
            code = _run_rank(entry, args, rank_env(rank, nproc, port))
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        pids.add(pid)
    while pids:
        pid, status = os.wait()
        pids.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            _stop(pids)
            return code if code > 0 else 128 - code
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or not argv[1].isdigit() or int(argv[1]) < 1:
        print("usage: python -m tests.system.forked_ranks MODULE NPROC [ARGS...] (NPROC >= 1)",
              file=sys.stderr)
        return 2
    return run(argv[0], int(argv[1]), argv[2:])


if __name__ == "__main__":
    sys.exit(main())
