"""The checker that runs inside the sandbox: instructor code in a parent, each exercise in a throwaway child.

``course.grading`` starts ``python -I -m course.judge`` (under bubblewrap where it works) and talks
to it in JSON lines: it sends the instructor's setup cells one at a time, then per exercise the
student's answer cell and the instructor's check cell, and reads one reply per request. The
judge itself only ever runs instructor code. For each exercise it forks a child from that clean
state; the child sets its resource limits, runs the answer cell (after the earlier exercises'
answers, which later checks may use) and then the check cell, audits
what the checks rely on and reports one JSON object through a pipe of its own. The child never
sees the grader's channel, the next exercises' checks, or any other child, so whatever an
answer does can only decide its own exercise's points. After each child the judge kills every
process the child left behind (the judge is a child subreaper, so double-forked daemons come
back to it) and removes the files it created.

Threat model (see also ``course.grading`` and the README): the answer and its checks share one
process, so an answer written against its own exercise's checks (patching the checker from
inside a call, objects that compare equal to anything, forging the child's report) can at worst
earn that one exercise's points; ``answer_problems`` (definitions only at the top level, no
IPython), the captured references and the audit close the well-known tricks.
"""

from __future__ import annotations

import ast
import ctypes
import errno
import json
import os
import resource
import signal
import sys
import time
import traceback
import types

MAX_MESSAGE = 400
#: Modules whose attributes the checks rely on: rebinding one of them is tampering.
AUDITED_MODULES = ("builtins", "torch", "torch.nn", "torch.nn.functional", "numpy", "numpy.testing",
                   "math", "pickle", "copy", "course.assignments", "course.judge")
AUDITED_TYPES = ("torch.Tensor", "torch.nn.Module", "numpy.ndarray")
#: Methods whose definition runs code of the class when another class (or a subscript) uses it.
HOOK_METHODS = {"__init_subclass__", "__set_name__", "__mro_entries__", "__class_getitem__"}


def _pure(node: ast.AST, own: set[str]) -> str | None:
    """Why an expression evaluated at definition time would run code, or None if it cannot."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call | ast.Lambda | ast.NamedExpr | ast.Await | ast.Yield
                      | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            return "calls code"
        if isinstance(sub, ast.Subscript) and isinstance(_root(sub.value), ast.Name) \
                and _root(sub.value).id in own:
            return "subscripts a class of this cell"
    return None


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return all(_constant(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _constant(k) for k in node.keys) and all(map(_constant, node.values))
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand)
    if isinstance(node, ast.BinOp):
        return _constant(node.left) and _constant(node.right)
    return False


def _statement_problem(node: ast.stmt, own: set[str], in_class: bool) -> str | None:
    if isinstance(node, ast.Import | ast.ImportFrom | ast.Pass) and not in_class:
        return None
    if isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
        return None
    if isinstance(node, ast.Raise) and not in_class and isinstance(node.exc, ast.Call) \
            and isinstance(node.exc.func, ast.Name) and node.exc.func.id == "NotImplementedError" \
            and all(_constant(a) for a in node.exc.args):
        return None  # the student version's placeholder
    if isinstance(node, ast.Assign) and _constant(node.value) and all(
            isinstance(t, ast.Name) or (isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts))
            for t in node.targets):
        return None
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
            and (node.value is None or _constant(node.value)):
        return _pure(node.annotation, own)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        if in_class and node.name in HOOK_METHODS:
            return f"defines {node.name}, which runs when the class is used"
        args = node.args
        parts = [*node.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None),
                 *(a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                          args.vararg, args.kwarg) if a is not None and a.annotation),
                 *([node.returns] if node.returns else [])]
        return next((why for why in (_pure(p, own) for p in parts) if why), None)
    if isinstance(node, ast.ClassDef):
        if node.keywords or node.decorator_list:
            return "uses class keywords or decorators"
        why = next((w for w in (_pure(b, own) for b in node.bases) if w), None)
        return why or next((w for w in (_statement_problem(s, own, True) for s in node.body) if w), None)
    return "runs code at the top level"


def answer_problems(source: str) -> str | None:
    """Why an answer cell is refused, or None: only imports, def, class and constants may be at top level.

    Decorators, defaults, annotations and class bodies must not call anything either, so
    nothing a student wrote runs until the checks call it.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return f"SyntaxError: {error.msg} (line {error.lineno})"
    own = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    for node in tree.body:
        why = _statement_problem(node, own, False)
        if why:
            text = (ast.get_source_segment(source, node) or "").splitlines()[0][:80]
            return (f"line {node.lineno} {why} (`{text}`): an answer cell may only hold imports, "
                    "def, class and constant assignments")
    return None


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


def _child(request: dict, module: types.ModuleType, saved: dict, limits: dict, report: int) -> None:
    """The exercise process: limits, answer, checks, audit, one report; never returns."""
    try:
        _set_limits(limits)
        namespace = module.__dict__
        for key, earlier in request.get("earlier", []):  # checks may use earlier exercises' answers
            _run(earlier, namespace, f"<answer {key}>", limits)
        answer_error = _run(request["answer"], namespace, f"<answer {request['key']}>", limits)
        rebound = _changed(saved["names"], namespace, "")
        check_error = None
        if not rebound:
            check_error = _run(request["check"], namespace, f"<checks {request['key']}>", limits)
        result = {"answer_error": answer_error, "check_error": check_error,
                  "tampered": rebound or _audit(saved, namespace)}
        os.write(report, json.dumps(result).encode()[:20_000])
    finally:
        os._exit(0)


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


def _exercise(request: dict, module: types.ModuleType, limits: dict, channels: tuple[int, ...]) -> dict:
    saved = _snapshot(module.__dict__)
    before = _files(os.getcwd())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in (*channels, read):
            os.close(fd)
        _child(request, module, saved, limits, write)
    os.close(write)
    chunks, deadline = [], time.monotonic() + limits["cell_timeout"]
    status, timed_out = None, False
    os.set_blocking(read, False)
    while status is None:
        try:
            chunk = os.read(read, 65536)
            if chunk and sum(map(len, chunks)) < 40_000:
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
        chunks.append(os.read(read, 65536))
    except BlockingIOError:
        pass
    os.close(read)
    kill_strays()
    os.ftruncate(1, 0)  # the output log: nobody reads it, and the size limit is per file
    os.lseek(1, 0, os.SEEK_SET)
    _remove_new(os.getcwd(), before)
    try:
        result = json.loads(b"".join(chunks).decode())
        result = {k: result.get(k) for k in ("answer_error", "check_error", "tampered")}
        if not isinstance(result["tampered"], list):
            result["tampered"] = []
    except (ValueError, UnicodeDecodeError, AttributeError):
        if timed_out:
            why = f"timed out after {limits['cell_timeout']:g} s"
        elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
            why = f"the CPU time limit ({limits['cpu_seconds']} s) was reached"
        elif os.WIFSIGNALED(status):
            why = f"the process was killed ({signal.Signals(os.WTERMSIG(status)).name})"
        else:
            why = f"the process ended without a result (exit status {os.waitstatus_to_exitcode(status)})"
        result = {"answer_error": None, "check_error": None, "tampered": [], "fatal": why}
    return {"op": "result", "key": request["key"], **result}


def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _become(uid: int) -> None:
    """Drop root for a uid of this judge alone: rlimits then hold, and nothing else can be signalled."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def main() -> int:
    limits = json.loads(sys.argv[1])
    if limits.get("uid") is not None and os.getuid() == 0:
        _become(limits["uid"])
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
    channels = (replies.fileno(), requests.fileno())
    earlier: list[tuple[str, str]] = []
    for line in requests:
        request = json.loads(line)
        if request["op"] == "setup":
            error = _run(request["code"], module.__dict__, f"<setup cell {request['index']}>", limits)
            reply = {"op": "setup", "index": request["index"], "error": error}
        elif request["op"] == "exercise":
            reply = _exercise({**request, "earlier": list(earlier)}, module, limits, channels)
            earlier.append((request["key"], request["answer"]))
        else:
            break
        replies.write(json.dumps(reply) + "\n")
    kill_strays()
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except Exception:  # noqa: BLE001 - the grader reads the reason from stderr
        traceback.print_exc(file=sys.__stderr__)
        raise SystemExit(1) from None
