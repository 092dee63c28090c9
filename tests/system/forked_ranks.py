"""Run an entry point's ``main`` on N ranks forked from one process that imported it once.

``python -m tests.system.forked_ranks MODULE NPROC ARGS...`` gives each rank what
``torchrun --standalone --nproc-per-node=NPROC`` gives its workers (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, a free ``MASTER_PORT``, restart count 0),
calls ``MODULE.main(ARGS)`` in each, and exits with the first failing rank's status after
stopping the others, as torchrun's agent does. What it leaves out is the agent: one interpreter
imports torch and the trainer instead of three (an agent and two workers), which is most of a
tiny run's cost. The tests whose subject is the training arithmetic (equal weights on 1 and N
ranks, accumulation, resuming on another world size, refusals) launch through this; the tests of
restarts, rendezvous and agents launch torchrun's own agent (``tests.speedups.agent``: the agent
of ``python -m torch.distributed.run``, its workers forked with their libraries imported). ``MODULE`` may also be a script (a path
ending in ``.py``), run in each rank as ``python SCRIPT ARGS`` runs it.

The tests start these commands, and torchrun's (``common.ddp.launch.torchrun_command``), without
starting an interpreter each time either: ``popen`` and ``run_forked`` hand a ``python -m MODULE
ARGS`` command to one server per pytest process (``python -m tests.system.forked_ranks --serve``),
which imported torch and what torchrun's forking agent preloads (``tests.speedups.agent``) once, and
forks a process from itself that runs ``MODULE.main(ARGS)``, as the command would, in the
environment of ``launch_env``. A launch then costs its own work, not an interpreter's imports
(about 4 CPU seconds each). The server runs nothing itself, so no launch sees another's state.
A server may also be started under a command prefix (``via``: ``Cluster.command(host, [])``, on a
host of a test cluster, whose namespaces what it forks shares) and with other libraries imported
(``libraries``): one server per environment, folder, prefix and libraries.
One role, how the system tests start their training processes, hence one (long) file: the
server forks the commands this module's command line runs.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import psutil

from common.ddp.launch import free_port, launch_env
from tests.speedups.agent import forking_command, preload_libraries

#: Seconds the other ranks get to stop on their own after one failed, and after SIGTERM.
GRACE = 5.0


def forked_ranks_command(module: str, args: Sequence[str] = (), *, nproc: int = 2) -> list[str]:
    """The command line that runs ``module.main(args)`` on ``nproc`` forked ranks."""
    return [sys.executable, "-m", "tests.system.forked_ranks", module, str(nproc), *args]


def launch_command(module: str, args: Sequence[str] = (), *, nproc: int = 2,
                   max_restarts: int = 0) -> list[str]:
    """Forked ranks for a run that cannot fail over; torchrun's agent (it restarts the group) for
    one that may (``max_restarts > 0``), its workers forked (``tests.speedups.agent``)."""
    if max_restarts:
        return forking_command(module, args, nproc_per_node=nproc, max_restarts=max_restarts)
    return forked_ranks_command(module, args, nproc=nproc)


def launch(module: str, args: Sequence[str] = (), *, nproc: int = 2, max_restarts: int = 0,
           timeout: float = 120) -> subprocess.CompletedProcess:
    """``launch_command``'s run, forked from the server (``run_forked``)."""
    return run_forked(launch_command(module, args, nproc=nproc, max_restarts=max_restarts),
                      timeout=timeout)


def rank_env(rank: int, nproc: int, port: int) -> dict[str, str]:
    """The variables torchrun --standalone sets for worker ``rank`` of ``nproc``."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
            "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "ROLE_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": "forked-ranks"}


def _call(entry: Callable[[list[str]], int | None], args: list[str]) -> int:
    """``entry(args)``'s exit status, as ``sys.exit(entry(args))`` would give it."""
    try:
        code = entry(args) or 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - a crash is an exit status, as for a command
        traceback.print_exc()
        code = 1
    return code


def _run_rank(entry: Callable[[list[str]], int | None], args: list[str], env: dict[str, str]) -> int:
    os.environ.update(env)
    return _call(entry, args)


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


def _script_main(path: str) -> Callable[[list[str]], None]:
    """A ``main(args)`` that runs the script ``path`` as ``python path args`` does."""
    def main(args: list[str]) -> None:
        sys.argv = [path, *args]
        sys.path.insert(0, str(Path(path).parent))
        runpy.run_path(path, run_name="__main__")
    return main


def entry_point(target: str) -> Callable[[list[str]], int | None]:
    """``target``'s ``main``: a module's, imported, or a script's (a path ending in ``.py``)."""
    if target.endswith(".py"):
        return _script_main(target)
    return importlib.import_module(target).main


def run(module: str, nproc: int, args: list[str]) -> int:
    """Fork ``nproc`` ranks of ``module.main(args)``; the first nonzero status, else 0. The ranks
    start with what torchrun's forking agent preloads (``tests.speedups.agent``) imported already."""
    preload_libraries()
    entry = entry_point(module)
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


# --- The server: one interpreter that imported everything; a process forked from it per command.

def _job(request: dict) -> int:
    """In a child of the server: ``python -m MODULE ARGS``, with the request's environment, its
    stdout and stderr to the request's files, in a process group of its own (which ``kill``
    stops whole: a command and the ranks or workers it forked)."""
    os.setpgid(0, 0)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(request["env"])
    module, args = request["module"], request["args"]
    sys.argv = [module, *args]
    try:
        return _call(lambda argv: importlib.import_module(module).main(argv), args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _kill_tree(pid: int) -> None:
    """SIGKILL the job ``pid``: its process group, and its descendants in sessions of their own
    (torchrun starts fresh workers so)."""
    try:
        descendants = psutil.Process(pid).children(recursive=True)
        os.killpg(pid, signal.SIGKILL)
    except (psutil.NoSuchProcess, ProcessLookupError):  # it ended just now
        return
    for process in descendants:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def _write_status(path: str, status: int) -> None:
    written = Path(path + ".tmp")
    try:
        written.write_text(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}))
        os.replace(written, path)  # whole or absent: the client never reads half of it
    except FileNotFoundError:  # its folder is gone: the client dropped the process, no one waits
        pass


def _reap_jobs(jobs: dict[int, str]) -> None:
    """Write the status file of each job that has ended."""
    while jobs:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if not pid:
            return
        _write_status(jobs.pop(pid), status)


def serve(requests: BinaryIO, replies: BinaryIO, libraries: Sequence[str] = ()) -> int:
    """Import ``libraries`` (none given: what torchrun's forking agent preloads), then answer
    JSON-line requests (``module``, ``args``, ``env``, ``stdout``, ``stderr``, ``status``,
    ``preload``) until ``requests`` ends: fork a job for each (``_job``) and reply its pid; when
    it ends, write its exit status to the file ``status``. At the end, kill the jobs still
    running."""
    if libraries:
        for name in libraries:
            importlib.import_module(name)
    else:
        preload_libraries()
    jobs: dict[int, str] = {}
    while True:
        readable = select.select([requests], [], [], 0.05 if jobs else None)[0]
        _reap_jobs(jobs)
        if not readable:
            continue
        line = requests.readline()
        if not line:
            break
        request = json.loads(line)
        for module in request["preload"]:
            try:  # here, once, so that every later job starts with it imported
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - the job imports it again and says why
                pass
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            replies.close()
            os._exit(_job(request))
        jobs[pid] = request["status"]
        replies.write(json.dumps({"pid": pid}).encode() + b"\n")
    for pid in jobs:
        _kill_tree(pid)
    while jobs:
        pid, status = os.wait()
        _write_status(jobs.pop(pid), status)
    return 0


def _serve_main(libraries: Sequence[str] = ()) -> int:
    # Requests and replies unbuffered (a line read is only that line, so select() sees the
    # next); replies go out on a copy of stdout, and stdout itself where stderr goes (a log).
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    return serve(os.fdopen(0, "rb", buffering=0), replies, libraries)


#: Variables that may change between commands without another server, as each command gets
#: its own values and none is read at start-up: pytest's current test, what torch.compile sets
#: in the process that compiled (read when a process compiles), and the device plan's
#: (``common.device``, read when a rank makes its plan).
_VOLATILE = ("PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR",
             "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", "COMPANION_DEVICE",
             "COMPANION_RANKS_PER_HOST")


class ForkedProcess:
    """What ``subprocess.Popen(command, stdout=PIPE, stderr=..., text=True)`` returns, for a
    command forked from the server: ``pid``, ``args``, ``returncode``, ``poll``, ``wait``,
    ``communicate``, ``send_signal``; ``kill`` stops it and all it started. Its output goes
    to files in a folder of its own, read and removed once it has ended."""

    def __init__(self, args: list[str], pid: int, folder: Path, merged: bool) -> None:
        self.args, self.pid, self.returncode = args, pid, None
        self._folder, self._merged, self._output = folder, merged, None
        self._remove = weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)

    def poll(self) -> int | None:
        status = self._folder / "status"
        if self.returncode is None and status.exists():
            self._output = self.output()
            self.returncode = json.loads(status.read_text())["returncode"]
            self._remove()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def output(self) -> tuple[str, str | None]:
        """What it wrote to stdout, and to stderr (None if merged into stdout), so far."""
        if self._output is not None:
            return self._output
        out, err = (self._folder / name for name in ("stdout", "stderr"))
        return out.read_text(errors="replace"), (None if self._merged else
                                                 err.read_text(errors="replace"))

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired as error:
            error.output, error.stderr = self.output()
            raise
        return self.output()

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the command and every process it started: its process group, and its
        descendants in sessions of their own (torchrun starts fresh workers so)."""
        if self.poll() is None:
            _kill_tree(self.pid)


class RankServer:
    """A ``--serve`` process started with ``env`` in ``cwd``, under the command prefix ``via``
    (none: here; ``Cluster.command(host, [])``: on a host of a test cluster, in its network
    namespace, so what it forks runs there too), which imported ``libraries`` (none given: what
    torchrun's forking agent preloads); ``popen`` forks commands from it."""

    def __init__(self, env: dict[str, str], cwd: str, via: Sequence[str] = (),
                 libraries: Sequence[str] = ()) -> None:
        self.env, self.cwd, self.via, self.libraries = env, cwd, list(via), list(libraries)
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen([*self.via, sys.executable, "-m",
                                         "tests.system.forked_ranks", "--serve", *self.libraries],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log, env=env, cwd=cwd, bufsize=0)

    def serves(self, env: dict[str, str], cwd: str, via: Sequence[str] = (),
               libraries: Sequence[str] = ()) -> bool:
        """Whether a command forked from this server runs as one started in ``env`` and ``cwd``
        (under ``via``) would (the variables read at start-up are the server's: all but
        ``_VOLATILE``), with ``libraries`` imported."""
        def steady(variables: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in variables.items() if k not in _VOLATILE}
        return self.process.poll() is None and cwd == self.cwd and list(via) == self.via \
            and list(libraries) == self.libraries and steady(env) == steady(self.env)

    def popen(self, command: list[str], *, env: dict[str, str], merged: bool,
              preload: Sequence[str]) -> ForkedProcess:
        folder = Path(tempfile.mkdtemp(prefix="forked-"))
        for name in ("stdout", "stderr"):
            (folder / name).touch()
        request = {"module": command[2], "args": command[3:], "env": env,
                   "stdout": str(folder / "stdout"),
                   "stderr": str(folder / ("stdout" if merged else "stderr")),
                   "status": str(folder / "status"), "preload": list(preload)}
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        line = self.process.stdout.readline()
        if not line:
            self.log.seek(0)
            raise RuntimeError("the forked-ranks server exited:\n"
                               + self.log.read().decode(errors="replace")[-4000:])
        return ForkedProcess(command, json.loads(line)["pid"], folder, merged)

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self.log.close()


#: This process's servers: another starts when the environment, the folder or the prefix
#: (``via``: the host) changes (an earlier one ends with this process, with any command it still
#: runs, or with its host).
_servers: list[RankServer] = []


def _close_servers() -> None:
    while _servers:
        _servers.pop().close()


atexit.register(_close_servers)


def popen(command: Sequence[str], *, stderr: int = subprocess.PIPE,
          env: dict[str, str] | None = None, cwd: str | None = None,
          via: Sequence[str] = (), libraries: Sequence[str] = ()) -> ForkedProcess:
    """``subprocess.Popen(command, stdout=PIPE, stderr=stderr, text=True, env=env, cwd=cwd)``
    for a ``[sys.executable, "-m", MODULE, *ARGS]`` command (``stderr``: ``PIPE`` or ``STDOUT``;
    ``env``: ``launch_env()`` by default; ``cwd``: this process's), forked from a server started
    under the prefix ``via`` (``[*via, *command]`` is the command it stands for) that imported
    ``libraries`` (none given: what torchrun's forking agent preloads): ``MODULE.main(ARGS)``
    runs in a process of its own, with ``MODULE`` (and a forked-ranks command's module)
    imported already."""
    command = [str(part) for part in command]
    if command[:2] != [sys.executable, "-m"] or len(command) < 3:
        raise ValueError(f"not a `{sys.executable} -m MODULE ...` command: {command}")
    preloads = [command[2]]
    if command[2] == "tests.system.forked_ranks" and len(command) > 3 \
            and not command[3].endswith(".py"):
        preloads.append(command[3])
    env = launch_env() if env is None else env
    return server(env, cwd, via, libraries).popen(command, env=env,
                                                  merged=stderr == subprocess.STDOUT,
                                                  preload=preloads)


def server(env: dict[str, str], cwd: str | None = None, via: Sequence[str] = (),
           libraries: Sequence[str] = ()) -> RankServer:
    """This process's server for commands started in ``env`` and ``cwd`` (default: this
    process's) under ``via``, with ``libraries`` imported: the one running, else a new one, whose
    imports go on while this process does other things (the first ``popen`` waits for them)."""
    cwd = os.getcwd() if cwd is None else str(cwd)
    found = next((s for s in reversed(_servers) if s.serves(env, cwd, via, libraries)), None)
    if found is None:
        found = RankServer(env, cwd, via, libraries)
        _servers.append(found)
    return found


def server_pids() -> set[int]:
    """The pids of this process's servers that still run."""
    return {server.process.pid for server in _servers if server.process.poll() is None}


def run_forked(command: Sequence[str], *, timeout: float = 120,
               check: bool = True) -> subprocess.CompletedProcess:
    """``common.ddp.launch.run_command(command, timeout=timeout)`` forked from the server
    (``popen``): with ``check``, a ``RuntimeError`` with the end of its output if it failed.

    Raises:
        subprocess.TimeoutExpired: After ``timeout`` seconds, once the command and every process
            it started are killed.
    """
    process = popen(command)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    if check and process.returncode != 0:
        raise RuntimeError(f"{' '.join(process.args)} exited with {process.returncode}:\n"
                           f"{stdout[-2000:]}\n{stderr[-4000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        return _serve_main(argv[1:])
    if len(argv) < 2 or not argv[1].isdigit() or int(argv[1]) < 1:
        print("usage: python -m tests.system.forked_ranks MODULE NPROC [ARGS...] (NPROC >= 1)\n"
              "       python -m tests.system.forked_ranks --serve [LIBRARY...] (see popen)",
              file=sys.stderr)
        return 2
    return run(argv[0], int(argv[1]), argv[2:])


if __name__ == "__main__":
    sys.exit(main())
