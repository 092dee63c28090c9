"""The answer process: runs a student's answer cells, then does what the checker asks of them.

Forked by the checker (``checker``) before the checker has read the check cell, it runs the
earlier exercises' answers and this one (definitions only, see ``answer_rules``), says
whether they raised, and then serves requests until the checker closes the socket: call
this, read that attribute, iterate this generator. Every reply is plain data or a handle
(``channel``, ``codec``), with the state of the arguments the request brought. The
checker's own objects arrive as :class:`Peer` objects whose calls go back to the checker.

Whatever runs here is untrusted: the checker believes nothing it says beyond what the data
says (the threat model: ``course/grading/__init__.py``). What it reports it rebound among
the libraries and the setup's names (``rebound_names``) is an integrity record for the
report, never a score.
"""

from __future__ import annotations

import io
import os
import pickle
import resource
import socket
import sys
import types
from collections.abc import Callable

from course.grading.inside.answer_rules import defined_names
from course.grading.inside.argstate import leaves, state_of
from course.grading.inside.cells import run_cell
from course.grading.inside.channel import ChannelError, receive, send
from course.grading.inside.codec import encode, encode_exception
from course.grading.inside.ops import perform, set_rng_state

#: What the checker may ask: the object ops, and two of its own.
OPS = ("call", "getattr", "setattr", "getitem", "len", "iter", "next", "contains", "repr", "str",
       "copy", "deepcopy", "pickle", "names", "rebound")
#: Modules and classes whose rebinding the integrity record names (in this process only).
RECORDED_MODULES = ("builtins", "torch", "torch.nn", "torch.nn.functional", "numpy", "numpy.testing",
                    "math", "pickle", "copy", "course.student.checks")
RECORDED_TYPES = ("torch.Tensor", "torch.nn.Module", "numpy.ndarray")


class Peer:
    """One of the checker's objects (a check-cell function, generator or class instance)."""

    __slots__ = ("_server", "_id")

    def __init__(self, server: Server, peer_id: int) -> None:
        object.__setattr__(self, "_server", server)
        object.__setattr__(self, "_id", peer_id)

    def _ask(self, op: str, *args: object) -> object:
        return self._server.ask(op, self._id, args)

    def __getattr__(self, name: str) -> object:
        return self._ask("getattr", name)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._ask("call", args, kwargs)

    def __getitem__(self, key: object) -> object:
        return self._ask("getitem", key)

    def __len__(self) -> int:
        return self._ask("len")

    def __iter__(self):
        return self._ask("iter")

    def __next__(self) -> object:
        return self._ask("next")

    def __contains__(self, item: object) -> bool:
        return self._ask("contains", item)

    def __repr__(self) -> str:
        return self._ask("repr")

    def __str__(self) -> str:
        return self._ask("str")

    def __reduce_ex__(self, protocol: int) -> tuple:
        raise TypeError("an object of the checker's cannot be pickled in the answer's process")


class _FromChecker(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, server: Server) -> None:
        super().__init__(file)
        self.server, self.loaded = server, set()

    def persistent_load(self, pid: tuple) -> object:
        kind, number = pid
        obj = self.server.objects[number] if kind == "H" else Peer(self.server, number)
        self.loaded.add(id(obj))
        return obj


class Server:
    """The answer process's end of the socket: its objects by handle id, and the loop."""

    def __init__(self, sock: socket.socket, namespace: dict, rebound: Callable[[], list[str]]) -> None:
        self.sock, self.namespace, self.rebound = sock, namespace, rebound
        self.objects: dict[int, object] = {}
        self.ids: dict[int, int] = {}

    def register(self, obj: object) -> int:
        if id(obj) not in self.ids:
            self.ids[id(obj)] = len(self.objects) + 1
            self.objects[len(self.objects) + 1] = obj
        return self.ids[id(obj)]

    @staticmethod
    def _peer_id(obj: object) -> int | None:
        return object.__getattribute__(obj, "_id") if type(obj) is Peer else None

    def encode(self, value: object) -> object:
        return encode(value, self.register, self._peer_id)

    def _send(self, message: tuple) -> None:
        send(self.sock, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def _receive(self) -> tuple[tuple, set]:
        unpickler = _FromChecker(io.BytesIO(receive(self.sock)), self)
        return unpickler.load(), unpickler.loaded

    def hello(self, answer_error: str | None) -> None:
        self._send(("hello", answer_error))

    def ask(self, op: str, peer_id: int, args: tuple) -> object:
        """A call back to the checker; its requests meanwhile are served."""
        self._send(("req", op, peer_id, self.encode(args), None))
        while True:
            message, loaded = self._receive()
            if message[0] == "req":
                self._serve(message, loaded)
                continue
            _, ok, value, rng = message
            set_rng_state(rng)
            if not ok:
                raise value
            return value

    def loop(self) -> None:
        """Serve the checker until it closes the socket."""
        while True:
            try:
                message, loaded = self._receive()
            except ChannelError:
                return
            self._serve(message, loaded)

    def _serve(self, message: tuple, loaded: set) -> None:
        _, op, target, args, rng = message
        set_rng_state(rng)
        mine = leaves(args, lambda v: id(v) in loaded)
        try:
            if op not in OPS:
                raise ValueError(f"unknown request {op!r}")
            if op == "names":
                value = {n: self.namespace[n] for n in args[0] if n in self.namespace}
            elif op == "rebound":
                value = [str(t) for t in self.rebound()]
            else:
                value = perform(op, self.objects[target], args)
            reply, ok = self.encode(value), True
        except BaseException as error:  # noqa: BLE001 - every failure goes to the checker
            reply, ok = encode_exception(error, self.register, self._peer_id), False
        states = self.encode([state_of(leaf) for leaf in mine])
        self._send(("ret", ok, reply, states, None))


def settle_imports() -> None:
    """Import what rebinds recorded names as a side effect of its own import, before the snapshot.

    ``torch._dynamo`` wraps ``torch.manual_seed`` (and more) when first imported, which torch
    does lazily, e.g. at a model's first optimizer step. Imported only then, an honest answer
    would show in the integrity record. The judge calls this once, before it forks.
    """
    if "torch" in sys.modules:
        import torch._dynamo  # noqa: F401


def snapshot(namespace: dict) -> dict:
    """References to the setup's names and the recorded modules and classes, before the answer runs."""
    settle_imports()
    modules = {name: dict(vars(sys.modules[name])) for name in RECORDED_MODULES if name in sys.modules}
    classes = {}
    for dotted in RECORDED_TYPES:
        module, _, attr = dotted.rpartition(".")
        if module in sys.modules:
            classes[dotted] = dict(vars(getattr(sys.modules[module], attr)))
    return {"names": dict(namespace), "modules": modules, "classes": classes}


def _changed(before: dict, now: dict, what: str) -> list[str]:
    return [f"{what}{k}" for k, v in before.items() if now.get(k, _changed) is not v]


def rebound_names(saved: dict, namespace: dict) -> list[str]:
    """What student code rebound since ``snapshot``: setup names, library attributes, tracing hooks."""
    found = _changed(saved["names"], namespace, "")
    for name, attrs in saved["modules"].items():
        found += _changed(attrs, vars(sys.modules[name]), name + ".")
    for dotted, attrs in saved["classes"].items():
        module, _, attr = dotted.rpartition(".")
        found += _changed(attrs, dict(vars(getattr(sys.modules[module], attr))), dotted + ".")
    if sys.gettrace() is not None or sys.getprofile() is not None:
        found.append("sys.settrace/setprofile")
    return list(dict.fromkeys(found))[:20]


def _keep_only(fd: int) -> None:
    """Close every descriptor but the standard three and ``fd`` (the answer's socket)."""
    os.closerange(3, fd)
    os.closerange(fd + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def answer_process(request: dict, module: types.ModuleType, limits: dict, sock: socket.socket) -> None:
    """Run the answers (the earlier exercises' too: later checks may use them), then serve; never returns."""
    try:
        _keep_only(sock.fileno())
        namespace = module.__dict__
        for key, earlier in request.get("earlier", []):
            run_cell(earlier, namespace, f"<answer {key}>", limits)
        saved = snapshot(namespace)  # after the earlier answers: what they define is theirs to answer for
        for name in defined_names(request["answer"]):  # this answer may define those names anew
            saved["names"].pop(name, None)
        answer_error = run_cell(request["answer"], namespace, f"<answer {request['key']}>", limits)
        server = Server(sock, namespace, lambda: rebound_names(saved, namespace))
        server.hello(answer_error)
        server.loop()
    finally:
        os._exit(0)
