"""The judge, inside the sandbox: instructor setup in a template process, two more per exercise.

Started by the grader (``course.grading.judges``) as ``python -m course.grading.inside.judge
LIMITS_JSON``, behind bubblewrap and ``setpriv``, in a fresh working copy. It speaks JSON
lines on stdin/stdout: setup cells one at a time, then per exercise the student's answer
cell (an answer left as handed out is only recorded, ``answer``, for the later exercises to see). Before reading anything it forks a zygote (:class:`Zygote`), which forks a template
(:class:`Template`) per submission; the template runs the setup cells and never holds a check
cell; per exercise the template forks the checker, which
waits until the judge says ``place`` and the grader has put it into the exercise's cgroups
(where there are any: ``course.grading.cgroups``), then forks the answer process
(``checker``, ``answer``); the judge replies ``ready`` and only then is sent the check cell,
which it passes to the checker through a pipe. One reply per request. The judge itself only
ever runs instructor code. Each exercise's processes start from the same clean state and
never see the grader's channel or another exercise's processes. Before each exercise the
judge leaves exactly ``file_mb`` MiB free in the sandbox's working copy (``space``). After
each exercise it kills every process left behind (it is a child subreaper, so double-forked
daemons come back to it), names a filled working copy or ``/dev/shm``, removes the files that
were created, and, if a file that existed before was changed by the answer, says so and
stops: the grader starts a fresh judge for the rest.

One judge grades every submission in turn (of every notebook the grader was given), each opened
by ``begin``: the judge kills the last template, removes the files its setup cells left, and the
zygote forks a fresh one, so every submission's setup cells run from the same clean state (the
zygote runs no cell and reads no request), and the earlier answers an exercise sees are its own
submission's. An answer runs under the judge's uid and may signal the zygote or its template: a
zygote that forks no template makes ``begin`` fail, and a template that stops answering after an
exercise makes the reply say ``restart``; either way the grader starts a fresh judge for what is
left, and no other submission pays for it. The threat model is in ``course/grading/__init__.py``.
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

import psutil

from course.grading.inside.processes import PING_SECONDS, Template, Zygote
from course.grading.inside.space import (
    Reserve,
    changed_files,
    file_stats,
    listing,
    remove_new,
    space_hit,
)

#: prctl(2) options the command line cannot set (``setpriv`` has no flag for them).
PR_SET_DUMPABLE = 4  # 0: no ptrace of the judge or its forks, no reading their memory or descriptors
PR_SET_CHILD_SUBREAPER = 36  # orphans of the exercises come back to the judge
USAGE = """\
usage: python -m course.grading.inside.judge LIMITS_JSON

The judge of course.grading: it runs inside the sandbox and is started by the grader
(`python -m course.grading --submissions DIR`), which speaks JSON lines to it on stdin and
stdout. It is not meant to be started by hand. LIMITS_JSON is one JSON object: repo, uid,
cell_timeout, memory_mb, cpu_seconds, processes, open_files, file_mb (and shm, work_tmpfs, cgroups)."""


def kill_strays(keep: tuple[int, ...] = ()) -> None:
    """Kill and reap every child of this process but ``keep`` until none is left (orphans come back)."""
    me = psutil.Process()
    for _ in range(1000):
        strays = [c for c in me.children() if c.pid not in keep]
        if not strays:
            return
        for child in strays:
            try:
                os.kill(child.pid, signal.SIGKILL)
                os.waitpid(child.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _await_ready(ready: int, template: Template, deadline: float) -> bool | int:
    """True once the checker says ready; its wait status if it ended before; False: time is up."""
    while time.monotonic() < deadline:
        if select.select([ready], [], [], 0.05)[0]:
            return os.read(ready, 1) == b"r"
        line = template.line(0)
        if line is not None:
            return int(line.split()[1])
    return False


def _pass_check(request: dict, ready: int, check: int, template: Template, io: tuple,
                deadline: float) -> bool | int:
    """Once the checker is ready, reply ``ready`` and pass it the check cell the grader sends."""
    requests, replies = io
    state = _await_ready(ready, template, deadline)
    if state is not True:
        return state
    replies.write(json.dumps({"op": "ready", "key": request["key"]}) + "\n")
    message = json.loads(requests.readline() or "{}")
    if message.get("op") != "check" or message.get("key") != request["key"]:
        return False
    data = str(message.get("check", "")).encode()
    del message
    try:
        while data:
            data = data[os.write(check, data[:65536]):]
    except BrokenPipeError:
        pass
    return True


def _collect(report: int, pid: int, template: Template, deadline: float,
             status: int | None) -> tuple[bytes, int, bool]:
    """The checker's report, its wait status (from the template), and whether it ran out of time."""
    chunks, timed_out = [], False
    os.set_blocking(report, False)
    while status is None:
        try:
            chunk = os.read(report, 65536)
            if chunk and sum(map(len, chunks)) < 80_000:
                chunks.append(chunk)
        except BlockingIOError:
            pass
        line = template.line(0.01)
        if line is not None:
            status = int(line.split()[1])
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            status, timed_out = int(template.line(None).split()[1]), True
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


def _placed(request: dict, pid: int, limits: dict, io: tuple) -> bool:
    """Ask the grader to put the checker ``pid`` into the exercise's cgroups (if it has them)."""
    if not limits.get("cgroups"):
        return True
    requests, replies = io
    replies.write(json.dumps({"op": "place", "key": request["key"], "pid": pid}) + "\n")
    message = json.loads(requests.readline() or "{}")
    return message.get("op") == "placed" and message.get("key") == request["key"] and message.get("ok") is True


def _run_checker(request: dict, template: Template, limits: dict, io: tuple) -> tuple[bytes, int, bool, bool]:
    """Fork the checker, place it, let it go on, pass it the check cell, collect its report.

    Returns the report, its wait status, whether it ran out of time and whether it was placed.
    """
    (ready_r, ready_w), (check_r, check_w), (report_r, report_w) = os.pipe(), os.pipe(), os.pipe()
    pid = template.start(request, (ready_w, check_r, report_w))
    for fd in (ready_w, check_r, report_w):
        os.close(fd)
    deadline = time.monotonic() + limits["cell_timeout"]
    if pid is None:
        raise RuntimeError("the template process is gone")
    placed = _placed(request, pid, limits, io)
    try:  # the checker waits for this byte before it forks the answer process
        os.write(check_w, b"g" if placed else b"-")
    except BrokenPipeError:
        pass
    passed = _pass_check(request, ready_r, check_w, template, io, deadline) if placed else False
    if passed is False:
        os.kill(pid, signal.SIGKILL)
    os.close(check_w)
    os.close(ready_r)
    payload, status, timed_out = _collect(report_r, pid, template, deadline,
                                          passed if passed is not True and passed is not False else None)
    os.close(report_r)
    return payload, status, timed_out, placed


def _result(payload: bytes, status: int, timed_out: bool, limits: dict) -> tuple[dict, list]:
    """The checker's report, only the fields known, and the paths it wrote; or why there is none."""
    try:
        got = json.loads(payload.decode())
        result = {k: got.get(k) for k in ("answer_error", "check_error", "tampered", "rebound")}
        for key in ("tampered", "rebound"):
            result[key] = [str(t) for t in result[key]] if isinstance(result[key], list) else []
        written = got.get("written") if isinstance(got.get("written"), list) else []
    except (ValueError, UnicodeDecodeError, AttributeError):
        result = {"answer_error": None, "check_error": None, "tampered": [], "rebound": [],
                  "fatal": _why(status, timed_out, limits)}
        written = []
    return result, written


def place_files(root: str, files: object) -> str | None:
    """Write a file exercise's answer files (relative path -> text, from the grader) into the working
    copy ``root``, as new files of the exercise (removed after it, as everything it creates); why not,
    if a path leaves the working copy, passes a link or names a file that is there already."""
    if not isinstance(files, dict):
        return None
    for relative, text in files.items():
        parts = relative.split("/") if isinstance(relative, str) else []
        if not parts or not isinstance(text, str) or relative.startswith("/") or \
                any(part in ("", ".", "..") for part in parts):
            return f"cannot place the answer file {relative!r}: not a path inside the working copy"
        folder = root
        for part in parts[:-1]:
            folder = os.path.join(folder, part)
            if os.path.islink(folder) or (os.path.exists(folder) and not os.path.isdir(folder)):
                return f"cannot place the answer file {relative}: {part} is not a folder of the working copy"
            if not os.path.exists(folder):
                os.mkdir(folder)
        try:
            fd = os.open(os.path.join(folder, parts[-1]), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            return f"cannot place the answer file {relative}: {error.strerror}"
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    return None


def _exercise(request: dict, template: Template, limits: dict, io: tuple, reserve: Reserve | None,
              keep: tuple[int, ...] = ()) -> dict:
    root = os.getcwd()
    if reserve is not None:
        reserve.refill()
    before, stats = listing(root), file_stats(root)
    shm = limits.get("shm")
    shm_before = listing(shm) if shm and os.path.isdir(shm) else set()
    files = request.pop("files", None)
    problem = place_files(root, files)  # new files of this exercise: removed with what it creates
    if problem:
        remove_new(root, before)
        return {"op": "result", "key": request["key"], "answer_error": None, "check_error": None,
                "tampered": [], "rebound": [], "fatal": problem}
    payload, status, timed_out, placed = _run_checker(request, template, limits, io)
    kill_strays(keep=(template.pid, *keep))
    os.ftruncate(1, 0)  # the output log: nobody reads it, and the size limit is per file
    os.lseek(1, 0, os.SEEK_SET)
    result, written = _result(payload, status, timed_out, limits)
    hit = space_hit(root, shm, limits, reserve) if placed else \
        "the exercise could not be put under its limits (the grader placed no cgroup)"
    if hit:
        result["fatal"] = hit
    changed = changed_files(stats, written, root)
    remove_new(root, before)
    if shm and os.path.isdir(shm):  # its size limit is then the exercise's, not the notebook's
        remove_new(shm, shm_before)
    if changed:  # the setup's files differ from what the next checks expect: a fresh judge
        result = {**result, "tampered": [*result["tampered"], *changed], "restart": True}
    return {"op": "result", "key": request["key"], **result}


def _found(limits: dict) -> dict[str, set[str]]:
    """What the working copy and ``/dev/shm`` hold before any setup cell ran (the zygote's imports
    may have written caches in HOME: they stay)."""
    shm = limits.get("shm")
    return {folder: listing(folder) for folder in (os.getcwd(), shm) if folder and os.path.isdir(folder)}


def _as_found(found: dict[str, set[str]]) -> None:
    """Remove what the last submission's setup cells left, so that setup files do not pile up over a
    judge's submissions (of every notebook, in the sandbox's bounded working copy)."""
    for folder, before in found.items():
        remove_new(folder, before)


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def _effective_capabilities() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1], 16) for line in status if line.startswith("CapEff:"))


def _privileges_problem(limits: dict) -> str | None:
    """Why this judge must not run: its privileges were not set by the grader's command line."""
    uid = limits.get("uid")
    if uid is not None and (os.getuid(), os.geteuid()) != (uid, uid):
        return f"runs as uid {os.getuid()}, not its own uid {uid}: start it through the grader (setpriv)"
    if os.geteuid() == 0 and _effective_capabilities():
        return "runs as root with capabilities: start it through the grader (setpriv drops them)"
    return None


def _limits(argv: list[str]) -> dict | None:
    """The limits the grader passes as one JSON object, or None for anything else (``--help``)."""
    if len(argv) != 1:
        return None
    try:
        limits = json.loads(argv[0])
    except ValueError:
        return None
    return limits if isinstance(limits, dict) and "repo" in limits else None


def main(argv: list[str] | None = None) -> int:
    limits = _limits(sys.argv[1:] if argv is None else argv)
    if limits is None:
        print(USAGE, file=sys.stderr)
        return 2
    problem = _privileges_problem(limits)
    if problem:
        print(f"course.grading.inside.judge: {problem}", file=sys.stderr)
        return 2
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_DUMPABLE, 0)
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
    zygote = Zygote(module, limits, (requests, replies))  # before any request is read
    template: Template | None = None
    # after the zygote: no template, checker or answer process holds the reserve
    reserve = Reserve(os.getcwd(), limits["file_mb"]) if limits.get("work_tmpfs") else None
    found: dict[str, set[str]] | None = None  # the files the first submission's setup cells found
    while line := requests.readline():
        request = json.loads(line)
        if request["op"] == "begin" or template is None:  # a fresh template, no earlier answers
            if template is not None:
                template.close()
                _as_found(found or {})  # the next setup cells find the files the first ones found
            # The first template waits for the zygote's imports (torch...): on a busy machine longer than a ping.
            first = found is None
            template, earlier = zygote.template(max(PING_SECONDS, limits["cell_timeout"]) if first else PING_SECONDS), []
            found = _found(limits) if found is None else found  # once the zygote's imports are done
        if request["op"] == "begin":  # the next submission
            reply = {"op": "begin", "ok": template is not None}
        elif template is None:
            break
        elif request["op"] == "setup":
            reply = {"op": "setup", "index": request["index"], "error": template.setup(request)}
        elif request["op"] == "answer":  # as handed out: not checked, but later exercises see it
            earlier.append((request["key"], request["answer"]))
            reply = {"op": "answer", "key": request["key"]}
        elif request["op"] == "exercise":
            reply = _exercise({**request, "earlier": list(earlier)}, template, limits, (requests, replies),
                              reserve, keep=(zygote.pid,))
            earlier.append((request["key"], request["answer"]))
            if not template.alive():  # stopped or killed by the answer: the rest on a fresh judge
                reply["restart"] = True
        else:
            break
        replies.write(json.dumps(reply) + "\n")
        if reply.get("restart") or template is None:
            break
    kill_strays()
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except Exception:  # noqa: BLE001 - the grader reads the reason from stderr
        traceback.print_exc(file=sys.__stderr__)
        raise SystemExit(1) from None
