"""Starting judges and speaking to them, from the grader's side of the sandbox.

``run_notebooks`` starts a judge (``inside/judge.py``) in a fresh working copy, behind
bubblewrap where it works (``allow_list`` is what it shows) and ``setpriv`` always (under a
uid of its own as root, and as an ordinary user with subordinate uids: ``uids``), sends it
the setup cells and exercises one request at a time, puts each exercise's checker into cgroups
of the exercise's own where the machine gives them (``cgroups``) and names the limit it hit,
checks the repository after every reply when there is no sandbox, and starts a new judge for
the exercises that are left when one is killed. One judge grades every submission of a grading
run in turn, of every notebook (each opened by ``begin``, which gives it a fresh template inside the
judge and the working copy as the judge found it). Only the fields it knows are kept from each reply.
The threat model is in ``course/grading/__init__.py``.
"""

from __future__ import annotations

import ast
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from course.grading.cgroups import Cgroups
from course.grading.config import GradingConfig
from course.grading.inside.channel import MAX_MESSAGE
from course.grading.sandbox import (
    SYSTEM,
    WORKDIR,
    FileGuard,
    bwrap_prefix,
    readable_by_others,
    setpriv_prefix,
)
from course.grading.uids import JudgeUid, Subordinate, choose_subordinate, judge_uid, kill_uid

#: How the judge is started: no user site, no working directory on sys.path (``-P`` needs 3.11).
JUDGE = [sys.executable, "-s", "-c", "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
         "from course.grading.inside.judge import main; raise SystemExit(main())"]
#: What the sandbox shows of the repository: the learner's package, the student runtime and what runs
#: inside; no instructor tooling (``tests/unit/test_layout.py`` checks it).
EXPOSED = ("common", "pyproject.toml", "course/__init__.py", "course/student", "course/grading/__init__.py",
           "course/grading/inside")
#: Room in the sandbox's working copy for the setup cells' files, beyond an exercise's ``--file-mb``.
SETUP_MB = 128


@dataclass
class Run:
    """What the judges said about one notebook."""

    replies: dict[str, dict] = field(default_factory=dict)
    setup_errors: dict[int, str] = field(default_factory=dict)
    changes: dict[str, list[str]] = field(default_factory=dict)  # exercise key or "(setup)"
    fatal: dict[str, str] = field(default_factory=dict)  # exercise key -> why the judge stopped


def judge_command(limits: dict) -> list[str]:
    """The judge's command line behind ``setpriv`` (which sets its privileges): no sandbox yet."""
    return [*setpriv_prefix(limits["uid"]), *JUDGE, json.dumps(limits)]


def _readline(proc: subprocess.Popen, buffer: bytearray, deadline: float) -> dict | None:
    """The judge's next reply, or None if it died or missed the deadline."""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(timeout=left):
                return None
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk or len(buffer) > 2**20:
                return None
            buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    try:
        return json.loads(line)
    except ValueError:
        return None


def _send(proc: subprocess.Popen, message: dict) -> bool:
    try:
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
    except BrokenPipeError:
        return False
    return True


def _placement(proc: subprocess.Popen, buffer: bytearray, reply: dict | None, key: str,
               place: Callable[[int], bool] | None, wait: float) -> dict | None:
    """Answer the judge's ``place`` (put its checker into the exercise's cgroups); its next reply."""
    if reply is None or reply.get("op") != "place" or reply.get("key") != key:
        return reply
    pid = reply.get("pid")
    placed = place is not None and type(pid) is int and place(pid)
    if not _send(proc, {"op": "placed", "key": key, "ok": bool(placed)}):
        return None
    return _readline(proc, buffer, wait)


def exchange(proc: subprocess.Popen, buffer: bytearray, request: dict, config: GradingConfig,
             deadline: float, place: Callable[[int], bool] | None = None) -> dict | None:
    """One request and its reply. An exercise goes in two steps: the answer, then (once the
    judge says ``ready``: the answer's process exists) the check cell, which that process never sees.
    Before that, a judge with cgroups asks to have its checker placed (``place``, given a pid)."""
    if request["op"] != "exercise":
        ok = _send(proc, request)
        return _readline(proc, buffer, min(deadline, time.monotonic() + config.timeout)) if ok else None
    wait = min(deadline, time.monotonic() + config.cell_timeout + 30)
    if not _send(proc, {k: v for k, v in request.items() if k != "check"}):
        return None
    reply = _placement(proc, buffer, _readline(proc, buffer, wait), request["key"], place, wait)
    if reply is None or reply.get("op") != "ready" or reply.get("key") != request["key"]:
        return reply
    if not _send(proc, {"op": "check", "key": request["key"], "check": request["check"]}):
        return None
    return _readline(proc, buffer, wait)


def _host_pid(root: int, inner: int) -> int | None:
    """The pid the host sees for ``inner``, a pid in the judge's PID namespace (``NSpid``'s last)."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return None
    for child in children:
        try:
            with open(f"/proc/{child.pid}/status", encoding="utf-8") as status:
                ids = next(line.split()[1:] for line in status if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if ids and int(ids[-1]) == inner:
            return child.pid
    return None


def _placer(proc: subprocess.Popen, cgroups: Cgroups) -> Callable[[int], bool]:
    def place(inner: int) -> bool:
        pid = _host_pid(proc.pid, inner)
        if pid is None:
            return False
        try:
            cgroups.place(pid)
        except OSError:
            return False
        return True
    return place


def _environment(workdir: Path, config: GradingConfig) -> dict[str, str]:
    """Only what the exercises need: no credentials of the instructor's reach the sandbox."""
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "LANG", "LC_ALL", "OMP_NUM_THREADS")
            or k.startswith("COMPANION_NETGUARD")}
    return {**keep, "HOME": str(workdir / "home"), "TMPDIR": str(workdir / "tmp"),
            "COMPANION_DATA": str(workdir / "data"), "MPLBACKEND": "Agg", "USER": "student",
            "LOGNAME": "student", "COMPANION_REPO": str(config.repo),
            "PYTHONPATH": os.pathsep.join([str(config.repo), os.environ.get("PYTHONPATH", "")])}


def allow_list(config: GradingConfig) -> list[Path]:
    """What the sandbox shows read-only besides the system: the interpreter's prefixes and the
    repository's ``EXPOSED`` parts.

    Raises:
        ValueError: The repository, the sources, the submissions or the report lies inside one of
            them (or a system folder): the sandbox would show it.
    """
    pythons = {Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    pythons |= {p.resolve() for p in pythons}
    for folder in (*pythons, *map(Path, SYSTEM)):
        for private in (config.repo, config.sources, config.submissions, config.out):
            if private is not None and Path(private).resolve().is_relative_to(folder.resolve()):
                raise ValueError(f"{private} lies inside {folder}, which the sandbox shows to every "
                                 "answer: move it elsewhere")
    return sorted(pythons) + [config.repo / p for p in EXPOSED if (config.repo / p).exists()]


def _prefix(config: GradingConfig, sandbox: str, uid: JudgeUid | None) -> list[str]:
    if sandbox != "bwrap":
        # Root with no uid to drop to: a PID namespace of its own, so that every process an answer
        # starts (double-forked daemons too) dies with the judge (setpriv drops its capabilities)
        if os.geteuid() == 0 and uid is None and shutil.which("unshare"):
            return ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
        return []
    userns = list(uid.userns) if uid is not None else []  # an ordinary user's subordinate uid
    return [*userns, *bwrap_prefix(allow_list(config), work_mb=config.file_mb + SETUP_MB,
                                   shm_mb=config.memory_mb, mapped=bool(userns))]


def _workdir(tmp: Path, uid: JudgeUid | None) -> Path:
    workdir = tmp / "work"
    for sub in ("home", "tmp", "data"):
        (workdir / sub).mkdir(parents=True)
    if uid is not None:
        os.chmod(tmp, 0o711)
        for path in (workdir, *workdir.iterdir()):
            os.chown(path, uid.host, uid.host)
    return workdir


def setup_imports(requests: list[dict]) -> list[str]:
    """The modules the setup cells import (absolute imports, in order): the judge's zygote imports
    them once, so that each submission's template does not import torch again. ``requests`` may be
    several submissions' (of several notebooks) one after the other: each cell is read once."""
    names: list[str] = []
    for code in dict.fromkeys(r["code"] for r in requests if r["op"] == "setup"):
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
    return list(dict.fromkeys(names))


#: One submission's work for the judges: its label (a student, or a (notebook, student) pair) and requests.
Work = tuple[Hashable, list[dict]]


def run_judge(work: list[Work], tmp: Path, config: GradingConfig, sandbox: str, uid: JudgeUid | None,
              guard: FileGuard | None, runs: dict[Hashable, Run]) -> list[Work]:
    """Send each submission's requests to one judge until done or it stops; returns the work left."""
    inside = WORKDIR if sandbox == "bwrap" else tmp / "work"
    cgroups = Cgroups.create(config.memory_mb, config.processes)
    limits = {"repo": str(config.repo), "uid": uid.inner if uid else None, "cell_timeout": config.cell_timeout,
              "memory_mb": config.memory_mb, "cpu_seconds": config.cpu_seconds,
              "processes": config.processes, "open_files": config.open_files, "file_mb": config.file_mb,
              "shm": "/dev/shm" if sandbox == "bwrap" else None,  # the sandbox's own: emptied per exercise
              "work_tmpfs": sandbox == "bwrap", "cgroups": sorted(cgroups.roots) if cgroups else [],
              "preload": setup_imports([r for _, requests in work for r in requests])}
    try:
        with open(tmp / "judge.err", "wb") as errors:
            proc = subprocess.Popen([*_prefix(config, sandbox, uid), *judge_command(limits)],
                                    cwd=tmp if sandbox == "bwrap" else inside, env=_environment(inside, config),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                                    start_new_session=True)
        try:
            return _serve(proc, work, config, guard, runs, cgroups)
        finally:
            _stop(proc, uid)
    finally:
        if cgroups is not None:
            cgroups.remove()


def _serve(proc: subprocess.Popen, work: list[Work], config: GradingConfig, guard: FileGuard | None,
           runs: dict[Hashable, Run], cgroups: Cgroups | None) -> list[Work]:
    """Each submission in turn, opened by ``begin`` (a fresh template in the judge); returns the
    work left when the judge stops: the rest of the submission it stopped in, then the others.

    A ``begin`` that fails after this judge graded a submission charges nobody (an answer may
    have stopped the zygote); on a judge that graded nothing yet, it is that submission's failure,
    as a judge that never answers would have been before.
    """
    buffer = bytearray()
    place = _placer(proc, cgroups) if cgroups is not None else None
    for index, (label, requests) in enumerate(work):
        deadline = time.monotonic() + config.timeout
        reply = exchange(proc, buffer, {"op": "begin"}, config, deadline)
        if reply is None or reply.get("op") != "begin" or reply.get("ok") is not True:
            if index:
                return work[index:]
            why = "the judge did not start a fresh template (it was killed or stopped answering)"
            runs[label].fatal.update({r["key"]: why for r in requests if r["op"] == "exercise"})
            return work[1:]
        left = _serve_one(proc, buffer, requests, config, deadline, guard, runs[label], cgroups, place)
        if left is not None:
            exercises = [r for r in left if r["op"] == "exercise"]
            # A new judge: the setup cells again, then the exercises after the one that stopped this one.
            rest = [r for r in requests if r["op"] in ("setup", "answer") or r in exercises] if exercises else []
            return ([(label, rest)] if rest else []) + work[index + 1:]
    return []


def _serve_one(proc: subprocess.Popen, buffer: bytearray, requests: list[dict], config: GradingConfig,
               deadline: float, guard: FileGuard | None, run: Run, cgroups: Cgroups | None,
               place: Callable[[int], bool] | None) -> list[dict] | None:
    """One submission's requests, each exercise in cgroups of its own; the requests left over
    if the judge stopped (None: all were answered, or nothing more can be graded)."""
    left = list(requests)
    while left:
        request = left.pop(0)
        key = request.get("key", "(setup)")
        exercise = request["op"] == "exercise" and cgroups is not None
        if exercise:
            cgroups.begin(key)
        reply = exchange(proc, buffer, request, config, deadline, place)
        hit = cgroups.end() if exercise else None
        changes = guard.changes() if guard else []
        if changes:
            run.changes.setdefault(key, []).extend(changes)
            guard.restore()
        if reply is None:
            why = hit or ("the notebook ran out of time" if time.monotonic() >= deadline
                          else "the checker process was killed or stopped answering")
            run.fatal[key] = why
            if request["op"] == "setup":  # nothing after a broken setup can be graded
                run.fatal.update({r["key"]: why for r in left if r["op"] == "exercise"})
                return None
            return left
        if reply.get("op") == "setup" and reply.get("error"):
            run.setup_errors[request["index"]] = str(reply["error"])[:MAX_MESSAGE]
        elif reply.get("op") == "result" and reply.get("key") == key:
            run.replies[key] = {**reply, "fatal": hit} if hit else reply
            if reply.get("restart"):  # the judge stopped: the setup's files had been changed
                return left
    return None


def _stop(proc: subprocess.Popen, uid: JudgeUid | None) -> None:
    """End the judge and everything it started (its session; every process of its own uid)."""
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except OSError:
            pass
    try:  # every exercise's processes are gone already: nothing is left to finish
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if uid is not None:
        kill_uid(uid.host)


def run_notebooks(work: list[Work], config: GradingConfig, sandbox: str, guard: FileGuard | None,
                  subordinate: Subordinate | None = None, name: str = "notebook") -> dict[Hashable, Run]:
    """Run every submission's requests (``(label, requests)`` in turn, of one notebook or of several)
    on as few judges as possible: one, and a new one (setup again) after one stopped. Its zygote
    imports what the setup cells of them all import. An ordinary user's judges run under
    ``subordinate`` uids where given (``own_uids``)."""
    runs = {label: Run() for label, _ in work}
    left = [(label, requests) for label, requests in work if any(r["op"] == "exercise" for r in requests)]
    while left:
        uid = judge_uid(subordinate) if may_drop(config, sandbox) else None
        with tempfile.TemporaryDirectory(prefix=f"grade-{name}-") as tmp:
            if sandbox != "bwrap":  # the sandbox's working copy is a tmpfs of its own
                _workdir(Path(tmp), uid)
            left = run_judge(left, Path(tmp), config, sandbox, uid, guard, runs)
    return runs


def run_notebook(requests: list[dict], label: Hashable, config: GradingConfig, sandbox: str,
                 guard: FileGuard | None, subordinate: Subordinate | None = None) -> Run:
    """``run_notebooks`` for one submission."""
    return run_notebooks([(label, requests)], config, sandbox, guard, subordinate)[label]


def _needed(config: GradingConfig) -> list[Path]:
    """What every judge reads first: the learner's package, the standard library, the interpreter."""
    return [config.repo / "common" / "__init__.py", Path(os.__file__), Path(sys.executable)]


def may_drop(config: GradingConfig, sandbox: str) -> bool:
    """Whether a judge may run under a uid of its own: as an ordinary user inside bubblewrap (where
    ``own_uids`` gives subordinate uids); as root inside bubblewrap always, else if that uid can read."""
    if os.geteuid() != 0:
        return sandbox == "bwrap"
    return sandbox == "bwrap" or all(readable_by_others(p) for p in _needed(config))


def own_uids(config: GradingConfig, sandbox: str) -> tuple[Subordinate | None, str]:
    """The subordinate ids an ordinary user's judges run under (None as root, without the sandbox,
    or where there are none), and the sentence that says which uid the judges have."""
    if sandbox != "bwrap":
        return None, ""
    if os.geteuid() == 0:
        return None, "a uid of its own for each judge"
    return choose_subordinate(allow_list(config), _needed(config))
