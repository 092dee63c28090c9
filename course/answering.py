"""The answer process: runs a student's answer cells, then does what the checker asks of them.

Forked by the checker (``course.judge``) before the checker has read the check cell, it runs
the earlier exercises' answers and this one (definitions only, see ``course.answer_rules``),
says whether they raised, and then serves requests until the checker closes the socket: call
this, read that attribute, iterate this generator. Every reply is plain data or a handle
(``course.channel``), with the state of the arguments the request brought and the random
generators' state. The checker's own objects arrive as :class:`Peer` objects whose calls go
back to the checker.

Whatever runs here is untrusted: the checker believes nothing it says beyond what the data
says. The audit it reports (what the answer rebound among the libraries) can only lower the
answer's own score.

Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
"""

from __future__ import annotations

import io
import pickle
import socket
from collections.abc import Callable

from course.argstate import leaves, state_of
from course.channel import ChannelError, receive, send
from course.codec import encode, encode_exception
from course.remote import _set_rng_state, perform

#: What the checker may ask: the object ops, and two of its own.
OPS = ("call", "getattr", "setattr", "getitem", "len", "iter", "next", "contains", "repr", "str",
       "copy", "deepcopy", "pickle", "names", "audit")


class Peer:
    """One of the checker's objects (a check-cell function, generator or class instance).

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """

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

    def __iter__(self):  # noqa: ANN204
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
    """The answer process's end of the socket: its objects by handle id, and the loop.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """

    def __init__(self, sock: socket.socket, namespace: dict, audit: Callable[[], list[str]]) -> None:
        self.sock, self.namespace, self.audit = sock, namespace, audit
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
            _set_rng_state(rng)
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
        _set_rng_state(rng)
        mine = leaves(args, lambda v: id(v) in loaded)
        try:
            if op not in OPS:
                raise ValueError(f"unknown request {op!r}")
            if op == "names":
                value = {n: self.namespace[n] for n in args[0] if n in self.namespace}
            elif op == "audit":
                value = [str(t) for t in self.audit()]
            else:
                value = perform(op, self.objects[target], args)
            reply, ok = self.encode(value), True
        except BaseException as error:  # noqa: BLE001 - every failure goes to the checker
            reply, ok = encode_exception(error, self.register, self._peer_id), False
        states = self.encode([state_of(leaf) for leaf in mine])
        self._send(("ret", ok, reply, states, None))
