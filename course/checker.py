"""The two processes of one exercise: the checker, which runs only instructor code, and the answer.

``course.judge`` forks the *checker* for each exercise from its clean state (the setup cells
run, nothing of the student's). The checker sets the resource limits and forks the *answer
process* (``course.answering``) at once, before it has read the check cell: that process runs
the earlier exercises' answers and this one, then does what the checker asks. Only then does
the checker read the check cell, bind each name the answers define (``defined_names``) to a
handle (``course.remote.Remote``) and run the visible and hidden checks, whose every call into
the student's code crosses a socket and comes back as data (``course.channel``).

Threat model: student code runs only in the answer process. It can do anything there: patch
torch, rewrite frames, forge replies, fork, kill its parent. None of that reaches the
checker's memory: the checker is not dumpable (no ptrace, no ``/proc/PID/mem``), the socket
carries only plain values read by an unpickler that refuses every global, and what comes back
is compared by code the student never ran in. A handle cannot pretend to be a value: it
does not compare, convert or add, so an object that "equals anything" equals nothing. The
answer process never holds the check cell's text, so it cannot read the hidden checks. What
is left to a hostile answer is its own exercise: it can return whatever data it likes (which
is what an answer is), and fail. Files: the files that existed before the exercise (the
setup's data) must come through unchanged unless the checker itself wrote them (an audit
hook records the checker's writes); a change is tampering, and the judge starts afresh for the
next exercise. The answer's own report of what it rebound (``audit``) can only lower its score.

Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import resource
import signal
import socket
import sys
import types

from course.answer_rules import defined_names
from course.answering import Server
from course.channel import ChannelError
from course.remote import Answer

MAX_MESSAGE = 400
#: Modules whose attributes the checks rely on: rebinding one of them is tampering.
AUDITED_MODULES = ("builtins", "torch", "torch.nn", "torch.nn.functional", "numpy", "numpy.testing",
                   "math", "pickle", "copy", "course.assignments")
AUDITED_TYPES = ("torch.Tensor", "torch.nn.Module", "numpy.ndarray")
def _describe(error: BaseException, limits: dict) -> str:
    if isinstance(error, MemoryError):
        return f"MemoryError: the memory limit ({limits['memory_mb']} MiB) was reached"
    if isinstance(error, OSError) and error.errno == errno.EFBIG:
        return f"OSError: the output/file size limit ({limits['file_mb']} MiB) was reached"
    if isinstance(error, OSError) and error.errno == errno.EAGAIN:
        return f"OSError: the process limit ({limits['processes']}) was reached"
    if isinstance(error, OSError) and error.errno == errno.EMFILE:
        return f"OSError: the open-file limit ({limits['open_files']}) was reached"
    text = f"{type(error).__name__}: {error}".strip().rstrip(":")
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " ..."


def _run(code: str, namespace: dict, name: str, limits: dict) -> str | None:
    try:
        exec(compile(code, name, "exec"), namespace)  # noqa: S102 - running cells is the judge's job
    except BaseException as error:  # noqa: BLE001 - every failure is a result, SystemExit included
        return _describe(error, limits)
    return None


def _settle_imports() -> None:
    """Import what rebinds audited names as a side effect of its own import, before the snapshot.

    ``torch._dynamo`` wraps ``torch.manual_seed`` (and more) when first imported, which torch
    does lazily, e.g. at a model's first optimizer step. Imported only then, inside a check,
    an honest answer would look like tampering.
    """
    if "torch" in sys.modules:
        import torch._dynamo  # noqa: F401


def _snapshot(namespace: dict) -> dict:
    """References to what the checks use, taken before any student code runs."""
    _settle_imports()
    modules = {name: dict(vars(sys.modules[name])) for name in AUDITED_MODULES if name in sys.modules}
    classes = {}
    for dotted in AUDITED_TYPES:
        module, _, attr = dotted.rpartition(".")
        if module in sys.modules:
            classes[dotted] = dict(vars(getattr(sys.modules[module], attr)))
    return {"names": dict(namespace), "modules": modules, "classes": classes}


def _changed(before: dict, now: dict, what: str) -> list[str]:
    return [f"{what}{k}" for k, v in before.items() if now.get(k, _changed) is not v]


def _audit(saved: dict, namespace: dict) -> list[str]:
    """What student code rebound among the setup's modules, functions and classes, and in libraries."""
    tools = {k: v for k, v in saved["names"].items() if callable(v) or isinstance(v, types.ModuleType)}
    found = _changed(tools, namespace, "")
    for name, attrs in saved["modules"].items():
        found += _changed(attrs, vars(sys.modules[name]), name + ".")
    for dotted, attrs in saved["classes"].items():
        module, _, attr = dotted.rpartition(".")
        found += _changed(attrs, dict(vars(getattr(sys.modules[module], attr))), dotted + ".")
    if sys.gettrace() is not None or sys.getprofile() is not None:
        found.append("sys.settrace/setprofile")
    return found[:20]


def _set_limits(limits: dict) -> None:
    with open("/proc/self/status") as status:
        vm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    memory = vm_kib * 1024 + limits["memory_mb"] * 2**20
    with os.scandir("/proc") as entries:
        mine = sum(1 for e in entries if e.name.isdigit() and _uid_of(e.name) == os.getuid())
    for kind, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, limits["cpu_seconds"]),
                        (resource.RLIMIT_NPROC, mine + limits["processes"]),
                        (resource.RLIMIT_NOFILE, limits["open_files"]),
                        (resource.RLIMIT_FSIZE, limits["file_mb"] * 2**20)):
        resource.setrlimit(kind, (value, value + 1 if kind == resource.RLIMIT_CPU else value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG


def _uid_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("Uid:"))
    except (OSError, StopIteration, ValueError):
        return None




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


def _keep_only(fd: int) -> None:
    """Close every descriptor but the standard three and ``fd`` (the answer's socket)."""
    os.closerange(3, fd)
    os.closerange(fd + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def answer_process(request: dict, module: types.ModuleType, limits: dict, sock: socket.socket) -> None:
    """Run the answers (the earlier exercises' too: later checks may use them), then serve; never returns."""
    try:
        namespace = module.__dict__
        for key, earlier in request.get("earlier", []):
            _run(earlier, namespace, f"<answer {key}>", limits)
        saved = _snapshot(namespace)  # after the earlier answers: what they define is theirs to answer for
        for name in defined_names(request["answer"]):  # this answer may define those names anew
            saved["names"].pop(name, None)
        answer_error = _run(request["answer"], namespace, f"<answer {request['key']}>", limits)
        server = Server(sock, namespace,
                        lambda: _changed(saved["names"], namespace, "") + _audit(saved, namespace))
        server.hello(answer_error)
        server.loop()
    finally:
        os._exit(0)


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
    setup = set(namespace) | set(dir(builtins))
    rebound = [n for n in defined_names(request["answer"]) if n in setup]
    if rebound:  # e.g. `def checks(...)` or `def abs(...)`: the checks would call the student's version
        return {"check_error": None, "tampered": rebound}
    wanted = [n for _, code in (*request.get("earlier", []), (None, request["answer"]))
              for n in defined_names(code) if n not in setup]
    try:
        values = answer.request("names", 0, (wanted,))
        if type(values) is not dict:
            raise ChannelError("the answer's process sent no names")
        namespace.update({k: v for k, v in values.items() if k in wanted})
        check_error = _run(check, namespace, f"<checks {request['key']}>", limits)
        tampered = answer.request("audit", 0, ())
    except BaseException as error:  # noqa: BLE001 - a dead answer process fails its exercise
        return {"check_error": _describe(error, limits) + _ended(pid, limits), "tampered": []}
    if check_error and check_error.startswith("ChannelError"):
        check_error += _ended(pid, limits)
    tampered = [str(t)[:200] for t in tampered][:20] if type(tampered) is list else ["(a malformed audit)"]
    return {"check_error": check_error, "tampered": tampered}


def checker_process(request: dict, module: types.ModuleType, limits: dict, pipes: tuple[int, int, int]) -> None:
    """Fork the answer process, say ready, read the check cell, check, report; never returns.

    ``pipes``: (ready, check, report). The judge sends the check cell only after ``ready``, so
    the answer process, forked before, never has it in memory.
    """
    ready, check_fd, report = pipes
    try:
        _set_limits(limits)
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            _keep_only(theirs.fileno())
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
        chunks = []
        while chunk := os.read(check_fd, 65536):
            chunks.append(chunk)
        check = b"".join(chunks).decode()
        if hello_error or not check.strip():
            result = {"check_error": hello_error or "no check cell was received", "tampered": []}
        else:
            result = _check(request, module.__dict__, answer, check, limits, pid)
        root = os.getcwd() + os.sep
        mine = sorted(p for p in written if p.startswith(root))[:300]
        result = {"answer_error": answer_error, **result, "written": mine}
        os.write(report, json.dumps(result).encode()[:60_000])
    finally:
        os._exit(0)
