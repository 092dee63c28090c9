"""Launching ``torchrun`` as a subprocess: how notebooks and tests start multi-process work.

The command is ``python -m common.ddp.torchrun``: torchrun with torchrun's arguments, whose failed
job ends in one line per cause (``common/ddp/torchrun.py``); a terminal can run it as well.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import MutableMapping, Sequence

#: The module the commands of ``torchrun_command`` run: torchrun, a failed job in one line per cause.
LAUNCHER = "common.ddp.torchrun"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a rendezvous endpoint).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_command(module: str, args: Sequence[str] = (), *, nproc_per_node: int = 2,
                     nnodes: int = 1, rdzv_endpoint: str | None = None, rdzv_id: str = "job",
                     max_restarts: int = 0) -> list[str]:
    """The ``torchrun ... -m module args`` command line, as a list for ``subprocess``.

    It calls ``python -m common.ddp.torchrun`` with this interpreter, so it uses the same
    environment as the caller. That is torchrun (``python -m torch.distributed.run``, what the
    ``torchrun`` script runs) with the same arguments, except that a failed job ends in one line
    per cause (``ranks 0, 1: error: cannot decode image ...``), not in each rank's line followed
    by the agent's ``ChildFailedError`` traceback; a job that succeeds prints the same. With one
    node and no endpoint it is ``--standalone`` (a local rendezvous on a free port); otherwise a
    c10d rendezvous at ``rdzv_endpoint`` that ``nnodes`` agents join. ``module`` may also be a
    script (a path ending in ``.py``).

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    command = [sys.executable, "-m", LAUNCHER, f"--nproc-per-node={nproc_per_node}"]
    if nnodes == 1 and rdzv_endpoint is None:
        command.append("--standalone")
    else:
        if rdzv_endpoint is None:
            raise ValueError(f"nnodes={nnodes} needs an rdzv_endpoint such as 'node0:29500'")
        command += [f"--nnodes={nnodes}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]
    if max_restarts:
        command.append(f"--max-restarts={max_restarts}")
    return command + worker_entry(module, args)


def worker_entry(target: str, args: Sequence[str] = ()) -> list[str]:
    """The end of a torchrun command line for ``target``, a module name or a script (a path ending
    in ``.py``): ``-m module args`` or ``script args``.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    return [str(target), *args] if str(target).endswith(".py") else ["-m", target, *args]


#: Environment for torchrun agents that may restart their workers. By default the agent
#: shares its rendezvous TCPStore with the workers, and a restarted worker group can read
#: the previous attempt's addresses from it and fail to connect ("connectFullMesh failed
#: ... Connection refused"; pytorch/pytorch#135712). A store per attempt avoids that.
#: ``python -m common.ddp.torchrun`` sets it when ``--max-restarts`` is above 0
#: (``restart_safe_environment``); a plain ``torchrun`` with restarts needs it exported.
RESTART_SAFE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


#: Set by ``launch_env`` to the pid of the process that starts a launch (a notebook's kernel, a
#: test): on Linux ``python -m common.ddp.torchrun`` then ends with its parent (``end_with_starter``).
STARTER_ENV = "COMPANION_LAUNCH_STARTER"
#: Linux's ``prctl`` option: the signal this process gets when the thread that started it ends.
_PR_SET_PDEATHSIG = 1


def launch_env(*, threads: int = 1) -> dict[str, str]:
    """This process's environment, plus ``OMP_NUM_THREADS`` (one thread per rank on a CPU),
    ``PYTHONUNBUFFERED`` (each line a rank prints arrives at once, as torchrun's ``python -u``
    workers print) and this process's pid as the launch's starter (on Linux the launcher ends
    with it: ``end_with_starter``). ``RESTART_SAFE_ENV`` is not in it: the launcher sets that
    itself when it may restart (``restart_safe_environment``).

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1",
            STARTER_ENV: str(os.getpid())}


def restart_safe_environment(max_restarts: int, environ: MutableMapping[str, str] = os.environ) -> None:
    """Put ``RESTART_SAFE_ENV`` in ``environ`` (torchrun's agent, and so its workers) when the
    agent may restart its workers (``max_restarts > 0``); a value already there is kept.

    Without restarts nothing is set, and the workers share the agent's rendezvous store, which is
    up before they start. A store of the workers' own is served by rank 0: a rank that reaches
    ``init_process_group`` before rank 0 has opened it finds the port closed and tries again
    after a pause, 0.25 to 0.7 s, in about a third of this machine's 2-rank launches (none
    with the agent's store).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if max_restarts > 0:
        for name, value in RESTART_SAFE_ENV.items():
            environ.setdefault(name, value)


def restart_hazard() -> str | None:
    """A warning if this torchrun worker may be restarted into the shared-store bug, else None.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    if restarts > 0 and os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1":
        return ("torchrun --max-restarts > 0 without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: a "
                "restarted worker group may fail to reconnect (pytorch/pytorch#135712); "
                "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 before torchrun")
    return None


def run_command(command: Sequence[str], *, timeout: float = 120,
                threads: int = 1) -> subprocess.CompletedProcess:
    """Run a (``torchrun``) command, wait, and raise with its output if it failed.

    A timeout, or an interrupt (the notebook's stop button: ``KeyboardInterrupt``), ends the
    whole launch, its workers too (``kill_launch``), before the exception goes on: torchrun
    starts each worker in a session of its own, so killing the launcher alone would leave them
    running, holding a core and the port. On Linux a kernel killed mid-launch takes the launch
    along too: Jupyter's restart SIGKILLs the kernel's process group, so the launcher runs in a
    session of its own, and it gets SIGTERM when its starter ends (``launch_env``), on which
    torchrun stops its workers.

    Returns:
        The finished process; ``.stdout`` holds what the ranks printed.

    Raises:
        RuntimeError: Naming the command and showing the end of its output.
        subprocess.TimeoutExpired: After ``timeout`` seconds, every process of the launch ended.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    command = [str(part) for part in command]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=launch_env(threads=threads), start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException as error:  # TimeoutExpired, KeyboardInterrupt
            kill_launch(process)
            stdout, stderr = process.communicate()
            if isinstance(error, subprocess.TimeoutExpired):
                raise subprocess.TimeoutExpired(command, timeout, stdout, stderr) from None
            raise
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done


def kill_launch(launcher: subprocess.Popen) -> None:
    """SIGKILL a launcher and every process under it: torchrun's workers, which it starts in
    sessions of their own (so a signal to its process group would miss them). Chapter 6.4 stops
    its elastic agents with it (``common.fsdp.elastic._kill_tree``) and shows its source.

    Introduced in chapters/06_4_elastic_training.ipynb.
    """
    import psutil  # only where a launch is stopped

    try:
        root = psutil.Process(launcher.pid)
        tree = [root, *root.children(recursive=True)]  # the launcher first: it starts no more
    except psutil.NoSuchProcess:
        return
    for process in tree:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def rank_error(message: str) -> str:
    """The one line that says why a ``run_command`` failed: the last ``... error: ...`` line a
    rank printed (``rank 0: error: 960 training images are too few ...``), else the first line.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    lines = message.strip().splitlines() or [message]
    return next((line for line in reversed(lines) if ": error: " in line), lines[0])


def end_with_starter(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Called by the launcher (``python -m common.ddp.torchrun``) first: on Linux, when
    ``STARTER_ENV`` names this process's parent, ask the operating system to send this process
    SIGTERM when that parent ends, however it ends: a notebook's kernel restarted or killed
    mid-launch, a SIGKILLed test. torchrun's agent stops its workers on SIGTERM, so the whole
    launch ends with the kernel instead of running on, holding the cores and the port. The
    variable is removed first, so the ranks do not inherit it. Returns whether the signal was
    set up.

    A variable that names another process was passed on (a shell that did not ``exec``, a batch
    job's exported environment on another machine): nothing is set up for it. Elsewhere (macOS,
    Windows) nothing is set up either: a killed kernel leaves its launch running there, to be
    stopped with ``kill_launch`` or the system's process list.

    Raises:
        SystemExit: With one line, when the parent ended while the signal was being set up (it
            would then come from no one), when the variable names no process id, or when prctl
            failed.

    Introduced in TROUBLESHOOTING.md ("A restarted kernel left its `torchrun` running").
    """
    starter = environ.pop(STARTER_ENV, None)
    if starter is None or not sys.platform.startswith("linux"):
        return False
    if not starter.isdigit():
        raise SystemExit(f"error: {STARTER_ENV} must be a process id, got {starter!r}")
    if os.getppid() != int(starter):
        return False
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise SystemExit(f"error: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != int(starter):  # it ended before the signal was set up
        raise SystemExit(f"error: the process that started this launch ({STARTER_ENV}={starter}) "
                         "has ended")
    return True
