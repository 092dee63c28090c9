"""The judge that runs inside the sandbox: instructor setup in one process, two more per exercise.

``course.grading`` starts the judge (under bubblewrap where it works) and talks to it in JSON
lines: setup cells one at a time, then per exercise the student's answer cell; the judge forks
the exercise's checker and answer processes (``course.checker``), replies ``ready``, and only
then is sent the check cell, which it passes to the checker. One reply per request. The judge
itself only ever runs instructor code. Each exercise's processes start from the same clean
state and never see the grader's channel or another exercise's processes, so whatever an answer
does can only decide its own exercise's points; ``course.checker`` says why it cannot decide
even those beyond what its data earns. After each exercise the judge kills every process left
behind (it is a child subreaper, so double-forked daemons come back to it), removes the files
that were created, and, if a file that existed before was changed by the answer, says so and
stops: the grader starts a fresh judge for the rest.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import time
import traceback
import types

from course.answer_rules import answer_problems
from course.checker import MAX_MESSAGE, _run, _settle_imports, checker_process

__all__ = ["answer_problems", "kill_strays", "main", "MAX_MESSAGE"]


def _children() -> list[int]:
    me, found = str(os.getpid()), []
    with os.scandir("/proc") as entries:
        for entry in entries:
            try:
                with open(f"/proc/{entry.name}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[1] == me:
                found.append(int(entry.name))
    return found


def kill_strays() -> None:
    """Kill and reap every child of this process until none is left (orphans come back to it).

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    for _ in range(1000):
        strays = _children()
        if not strays:
            return
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _files(root: str) -> set[str]:
    found = set()
    for folder, dirs, names in os.walk(root):
        found.update(os.path.join(folder, n) for n in (*dirs, *names))
    return found


def _remove_new(root: str, before: set[str]) -> None:
    for path in sorted(_files(root) - before, reverse=True):
        try:
            os.rmdir(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
        except OSError:
            pass


def _stats(root: str) -> dict[str, tuple]:
    """Regular files under ``root`` (but the output log) and what would show any change to them."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if os.path.isfile(path) and not os.path.islink(path) and name != "output.log":
                found[path] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return found


def _changed_files(before: dict[str, tuple], written: list, root: str) -> list[str]:
    """Files that existed before the exercise and changed, though the checker did not write them."""
    now = _stats(root)
    mine = [str(p) for p in written]
    return [os.path.relpath(p, root) + " (changed)" for p, stat in before.items()
            if now.get(p) != stat and not any(p == w or p.startswith(w + os.sep) for w in mine)][:20]


def _await_ready(ready: int, pid: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if select.select([ready], [], [], 0.05)[0]:
            return os.read(ready, 1) == b"r"
        if os.waitpid(pid, os.WNOHANG)[0]:
            return False
    return False


def _pass_check(request: dict, ready: int, check: int, pid: int, io: tuple, deadline: float) -> bool:
    """Once the checker is ready, reply ``ready`` and pass it the check cell the grader sends."""
    requests, replies = io
    if not _await_ready(ready, pid, deadline):
        return False
    replies.write(json.dumps({"op": "ready", "key": request["key"]}) + "\n")
    message = json.loads(requests.readline() or "{}")
    if message.get("op") != "check" or message.get("key") != request["key"]:
        return False
    data = str(message.get("check", "")).encode()
    try:
        while data:
            data = data[os.write(check, data[:65536]):]
    except BrokenPipeError:
        pass
    return True


def _collect(report: int, pid: int, deadline: float) -> tuple[bytes, int, bool]:
    """The checker's report, its exit status, and whether it ran out of time."""
    chunks, status, timed_out = [], None, False
    os.set_blocking(report, False)
    while status is None:
        try:
            chunk = os.read(report, 65536)
            if chunk and sum(map(len, chunks)) < 80_000:
                chunks.append(chunk)
        except BlockingIOError:
            pass
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = code
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            status, timed_out = os.waitpid(pid, 0)[1], True
        else:
            time.sleep(0.01)
    try:
        chunks.append(os.read(report, 65536))
    except BlockingIOError:
        pass
    return b"".join(chunks), status, timed_out


def _why(status: int, timed_out: bool, limits: dict) -> str:
    if timed_out:
        return f"timed out after {limits['cell_timeout']:g} s"
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return f"the CPU time limit ({limits['cpu_seconds']} s) was reached"
    if os.WIFSIGNALED(status):
        return f"the process was killed ({signal.Signals(os.WTERMSIG(status)).name})"
    return f"the process ended without a result (exit status {os.waitstatus_to_exitcode(status)})"


def _exercise(request: dict, module: types.ModuleType, limits: dict, io: tuple) -> dict:
    _settle_imports()  # once here, not in every answer process
    root = os.getcwd()
    before, stats = _files(root), _stats(root)
    (ready_r, ready_w), (check_r, check_w), (report_r, report_w) = os.pipe(), os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in (*(f.fileno() for f in io), ready_r, check_w, report_r):
            os.close(fd)
        checker_process(request, module, limits, (ready_w, check_r, report_w))
    for fd in (ready_w, check_r, report_w):
        os.close(fd)
    deadline = time.monotonic() + limits["cell_timeout"]
    if not _pass_check(request, ready_r, check_w, pid, io, deadline):
        os.kill(pid, signal.SIGKILL)
    os.close(check_w)
    os.close(ready_r)
    payload, status, timed_out = _collect(report_r, pid, deadline)
    os.close(report_r)
    kill_strays()
    os.ftruncate(1, 0)  # the output log: nobody reads it, and the size limit is per file
    os.lseek(1, 0, os.SEEK_SET)
    try:
        got = json.loads(payload.decode())
        result = {k: got.get(k) for k in ("answer_error", "check_error", "tampered")}
        result["tampered"] = [str(t) for t in result["tampered"]] if isinstance(result["tampered"], list) else []
        written = got.get("written") if isinstance(got.get("written"), list) else []
    except (ValueError, UnicodeDecodeError, AttributeError):
        result = {"answer_error": None, "check_error": None, "tampered": [], "fatal": _why(status, timed_out, limits)}
        written = []
    changed = _changed_files(stats, written, root)
    _remove_new(root, before)
    if changed:  # the setup's files are no longer what the next checks expect: a fresh judge
        result = {**result, "tampered": [*result["tampered"], *changed], "restart": True}
    return {"op": "result", "key": request["key"], **result}


def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _become(uid: int) -> None:
    """Drop root for a uid of this judge alone: rlimits then hold, and nothing else can be signalled."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _drop_capabilities() -> None:
    """Stay uid 0 but hold no capability: no ptrace of the (undumpable) checker, no reading of its
    descriptors through ``/proc``, no signals to other users. For root judges with no uid of
    their own (no bubblewrap, and an interpreter others cannot read)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in range(64):  # the bounding set (past the last capability this fails: fine)
        libc.prctl(24, capability, 0, 0, 0)  # PR_CAPBSET_DROP
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
        raise OSError(ctypes.get_errno(), "capset: cannot drop the judge's capabilities")


def main() -> int:
    limits = json.loads(sys.argv[1])
    if limits.get("uid") is not None and os.getuid() == 0:
        _become(limits["uid"])
    elif os.getuid() == 0:
        _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS first: an exec cannot give the capabilities back
        _drop_capabilities()
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of the exercises come back to the judge
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: an exercise cannot ptrace the judge or read its memory
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    requests = os.fdopen(os.dup(0), "r")
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.path[:0] = [limits["repo"]]
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    earlier: list[tuple[str, str]] = []
    while line := requests.readline():
        request = json.loads(line)
        if request["op"] == "setup":
            error = _run(request["code"], module.__dict__, f"<setup cell {request['index']}>", limits)
            reply = {"op": "setup", "index": request["index"], "error": error}
        elif request["op"] == "exercise":
            reply = _exercise({**request, "earlier": list(earlier)}, module, limits, (requests, replies))
            earlier.append((request["key"], request["answer"]))
        else:
            break
        replies.write(json.dumps(reply) + "\n")
        if reply.get("restart"):
            break
    kill_strays()
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except Exception:  # noqa: BLE001 - the grader reads the reason from stderr
        traceback.print_exc(file=sys.__stderr__)
        raise SystemExit(1) from None
