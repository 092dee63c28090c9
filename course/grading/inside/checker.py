"""The checker: one exercise's process that runs only instructor code, against an answer's handles.

The judge (``judge``) forks the checker for each exercise from its clean state (the setup
cells run, nothing of the student's). Once the grader has put it into the exercise's cgroups
(the judge's go), the checker sets the per-process resource limits and forks the answer
process (``answer``) at once, before it has read the check cell. Only then does it
read the check cell, bind each name the answers define (``answer_rules.defined_names``) to a
handle (``remote.Remote``) and run the visible and hidden checks, whose every call into the
student's code crosses a socket and comes back as data (``channel``). It reports JSON on a
pipe of its own; the threat model is in ``course/grading/__init__.py``.

Files: the files that existed before the exercise (the setup's data) must come through
unchanged unless the checker itself wrote them; an audit hook (``record_writes``) records
the checker's writes, and the judge compares.
"""

from __future__ import annotations

import builtins
import json
import os
import resource
import signal
import socket
import sys
import types

import psutil

from course.grading.inside.answer import answer_process
from course.grading.inside.answer_rules import defined_names
from course.grading.inside.cells import describe, run_cell
from course.grading.inside.channel import ChannelError
from course.grading.inside.remote import Answer


def set_limits(limits: dict) -> None:
    """The exercise's per-process resource limits, for this process and everything it starts.

    The process count is a cgroup's where the grader placed this process in one (``pids``: for the
    exercise as a whole, and its counter names the hit); else it is ``RLIMIT_NPROC`` (per uid: the
    judge's own, whose other processes are counted in).
    """
    memory = psutil.Process().memory_info().vms + limits["memory_mb"] * 2**20
    kinds = [(resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, limits["cpu_seconds"]),
             (resource.RLIMIT_NOFILE, limits["open_files"]), (resource.RLIMIT_FSIZE, limits["file_mb"] * 2**20)]
    if "pids" not in (limits.get("cgroups") or []):
        uid = os.getuid()
        mine = sum(1 for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid)
        kinds.append((resource.RLIMIT_NPROC, mine + limits["processes"]))
    for kind, value in kinds:
        resource.setrlimit(kind, (value, value + 1 if kind == resource.RLIMIT_CPU else value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG


#: Audit events whose path arguments the checker writes, moves or removes.
_WRITES = {"os.remove": 1, "os.rmdir": 1, "os.truncate": 1, "os.utime": 1, "os.chmod": 1,
           "shutil.rmtree": 1, "os.rename": 2, "shutil.copyfile": 2, "shutil.move": 2}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _path(value: object) -> str | None:
    if isinstance(value, str | bytes | os.PathLike):
        try:
            return os.path.abspath(os.fsdecode(value))  # not resolved: a write through a link the
            # answer planted lands on the link's target, which then shows as changed
        except (TypeError, ValueError):
            return None
    return None


def record_writes() -> set[str]:
    """Start recording the paths this process opens for writing, moves or removes (audit hook)."""
    written: set[str] = set()

    def hook(event: str, args: tuple) -> None:
        if event == "open" and len(args) >= 3:
            mode, flags = args[1], args[2]
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                    (isinstance(flags, int) and flags & _WRITE_FLAGS):
                written.update(p for p in (_path(args[0]),) if p)
        elif event in _WRITES:
            written.update(p for p in map(_path, args[:_WRITES[event]]) if p)

    sys.addaudithook(hook)
    return written


def _ended(pid: int, limits: dict) -> str:
    """Why the answer process ended, if it did."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return ""
    if not done:
        return ""
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return f" (the CPU time limit, {limits['cpu_seconds']} s, was reached)"
    if os.WIFSIGNALED(status):
        return f" (it was killed by {signal.Signals(os.WTERMSIG(status)).name})"
    return f" (exit status {os.waitstatus_to_exitcode(status)})"


def _check(request: dict, namespace: dict, answer: Answer, check: str, limits: dict, pid: int) -> dict:
    """Run the check cell against the answer's names: ``check_error``, ``tampered``, ``rebound``."""
    setup = set(namespace) | set(dir(builtins))
    shadowed = [n for n in defined_names(request["answer"]) if n in setup]
    if shadowed:  # e.g. `def checks(...)` or `def abs(...)`: the checks would call the student's version
        return {"check_error": None, "tampered": shadowed, "rebound": []}
    wanted = [n for _, code in (*request.get("earlier", []), (None, request["answer"]))
              for n in defined_names(code) if n not in setup]
    try:
        values = answer.request("names", 0, (wanted,))
        if type(values) is not dict:
            raise ChannelError("the answer's process sent no names")
        namespace.update({k: v for k, v in values.items() if k in wanted})
        check_error = run_cell(check, namespace, f"<checks {request['key']}>", limits)
        rebound = answer.request("rebound", 0, ())
    except BaseException as error:  # noqa: BLE001 - a dead answer process fails its exercise
        return {"check_error": describe(error, limits) + _ended(pid, limits), "tampered": [], "rebound": []}
    if check_error and check_error.startswith("ChannelError"):
        check_error += _ended(pid, limits)
    rebound = [str(t)[:200] for t in rebound][:20] if type(rebound) is list else ["(a malformed record)"]
    return {"check_error": check_error, "tampered": [], "rebound": rebound}


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def checker_process(request: dict, module: types.ModuleType, limits: dict, pipes: tuple[int, int, int]) -> None:
    """Wait to be placed, fork the answer process, say ready, read the check cell, check, report;
    never returns.

    ``pipes``: (ready, check, report); the first byte on ``check`` says go (``g``) or stop. The judge sends the check cell only after ``ready``, so
    the answer process, forked before, never has it in memory.
    """
    ready, check_fd, report = pipes
    try:
        if os.read(check_fd, 1) != b"g":  # the judge says go once the grader placed this process
            return
        set_limits(limits)
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            answer_process(request, module, limits, theirs)
        theirs.close()
        answer = Answer(ours)
        try:
            answer_error, hello_error = answer.hello(), None
        except ChannelError as error:
            answer_error, hello_error = None, f"ChannelError: {error}{_ended(pid, limits)}"
        # `checks()` lets NotImplementedError through, as under nbgrader: an answer that raises it
        # at the first call must not skip the visible checks and be judged by the hidden ones alone
        os.environ["NBGRADER_EXECUTION"] = "autograde"
        written = record_writes()
        os.write(ready, b"r")
        os.close(ready)
        check = _read_all(check_fd)
        if hello_error or not check.strip():
            result = {"check_error": hello_error or "no check cell was received", "tampered": [], "rebound": []}
        else:
            result = _check(request, module.__dict__, answer, check, limits, pid)
        root = os.getcwd() + os.sep
        mine = sorted(p for p in written if p.startswith(root))[:300]
        result = {"answer_error": answer_error, **result, "written": mine}
        os.write(report, json.dumps(result).encode()[:60_000])
    finally:
        os._exit(0)
