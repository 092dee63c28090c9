"""Calls between an exercise's checker and the process that runs the student's answer.

The checker (``checker``) never runs student code (the threat model: ``course/grading/__init__.py``). The answer runs in a process of its
own, forked before the checker has read the check cell. In the check's namespace each name
the answer defines is a :class:`Remote`: calling it, indexing it, iterating it or reading an
attribute sends a request over a socket, and the answer process replies with data
(``channel``, ``codec``) or with a handle to an object that stays there. Arguments go the other
way by value (pickled; the answer process may read what the checker sends), except the
checker's own functions, generators and objects of check-cell classes, which the answer
process gets as :class:`Peer` objects and calls back through the same socket.

What a call does to its arguments comes back with its reply: the state of every tensor,
model, optimizer, generator and array it was given, applied to the checker's originals, so
that ``w.grad is None`` or ``model.training`` in a check see what the answer did. The global
random generators (torch, NumPy, ``random``) travel one way: every request carries the
checker's state, so ``torch.manual_seed`` in a check seeds the answer's draws; what the answer
draws (or seeds) stays in its process, so no answer can choose the inputs the checks draw after
it. (Two calls with no seed or draw of the checker's in between therefore start from the same
state: a check that wants different draws seeds between them.)

A handle supports calls, attributes, ``[]``, ``len``, iteration, ``in``, ``repr``, copies and
``isinstance`` against classes the checker has imported; it does not compare, add or convert
(``==`` is identity, ``bool()`` raises), so an object of the student's own making cannot
claim to equal an expected value. Its attributes are the answer object's public ones and
``__dict__`` and ``__name__``: no other dunder is forwarded, so no library's protocol
(``__torch_function__``, ``__array_interface__``, ``__array__``, ``__dlpack__``) reaches the
answer's code, and ``isinstance`` holds only for pure-Python classes (``nn.Module``,
``Dataset``), never for a class C code unpacks (``codec.claimable_by_handle``).
"""

from __future__ import annotations

import builtins
import io
import pickle
import socket
import sys
import types

from course.grading.inside.argstate import apply_state, leaves
from course.grading.inside.channel import (
    ChannelError,
    Handle,
    PeerRef,
    RemoteException,
    loads_plain,
    receive,
    send,
)
from course.grading.inside.codec import claimable, claimable_by_handle, decode, is_plain
from course.grading.inside.ops import perform, rng_state

#: What the answer process may ask of the checker's objects (public attributes only).
PEER_OPS = ("call", "getattr", "getitem", "len", "iter", "next", "contains", "repr", "str")
_CURRENT: list[Answer] = []


def becomes_peer(value: object) -> bool:
    """Checker objects the answer gets as a ``Peer``: check-cell functions, classes, generators."""
    kind = type(value)
    if kind is Remote:
        return False
    if isinstance(value, types.MethodType):
        return becomes_peer(value.__self__)
    if isinstance(value, types.FunctionType):
        return value.__module__ == "__main__" or "<" in value.__qualname__
    if isinstance(value, type):
        return value.__module__ == "__main__" or "<locals>" in value.__qualname__
    if isinstance(value, types.GeneratorType) or hasattr(kind, "__next__"):
        return True
    return kind.__module__ == "__main__" or "<locals>" in kind.__qualname__


#: The only dunder attributes a handle reads from the answer's object (data: a dict, a str).
#: Every other ``__name__`` is refused, so no library's protocol (``__torch_function__``,
#: ``__array_interface__``, ``__dlpack__``, ``__fspath__``...) reaches the answer's code.
DUNDERS_READ = frozenset({"__dict__", "__name__"})


def _claimed(classes: tuple) -> type:
    return next((c for m, q in classes if (c := claimable_by_handle(m, q)) is not None), Remote)


class Remote:
    """A handle, in the checker, to an object in the answer's process."""

    __slots__ = ("_answer", "_id", "_class")
    #: torch reads ``__torch_function__`` from the object: ``__getattr__`` refuses it, so torch
    #: finds none and never dispatches to the answer. NumPy's ufuncs refuse a handle (TypeError).
    __array_ufunc__ = None

    def __init__(self, answer: Answer, handle: Handle) -> None:
        object.__setattr__(self, "_answer", answer)
        object.__setattr__(self, "_id", handle.id)
        object.__setattr__(self, "_class", _claimed(handle.classes))

    def _ask(self, op: str, *args: object) -> object:
        return self._answer.request(op, self._id, args)

    @property
    def __class__(self) -> type:  # isinstance() against the checker's classes
        return object.__getattribute__(self, "_class")

    def __getattr__(self, name: str) -> object:
        if type(name) is not str or (name.startswith("__") and name not in DUNDERS_READ):
            raise AttributeError(f"an answer's object shows no {name!r} in the checks")
        return self._ask("getattr", name)

    def __setattr__(self, name: str, value: object) -> None:
        if type(name) is not str or name.startswith("__"):
            raise AttributeError(f"the checks set no {name!r} on an answer's object")
        self._ask("setattr", name, value)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._ask("call", args, kwargs)

    def __getitem__(self, key: object) -> object:
        return self._ask("getitem", key)

    def __len__(self) -> int:
        size = self._ask("len")
        if type(size) is not int:
            raise TypeError("len() of an answer's object must be an int")
        return size

    def __iter__(self):
        it = self._ask("iter")
        return it if type(it) is Remote else iter(it)

    def __next__(self) -> object:
        return self._ask("next")

    def __contains__(self, item: object) -> bool:
        found = self._ask("contains", item)
        if type(found) is not bool:
            raise TypeError("`in` on an answer's object must give a bool")
        return found

    def __repr__(self) -> str:
        return str(self._ask("repr"))

    def __str__(self) -> str:
        return str(self._ask("str"))

    def __bool__(self) -> bool:
        raise TypeError("an object the answer returned has no truth value in the checks: return data")

    def __copy__(self) -> object:
        return self._ask("copy")

    def __deepcopy__(self, memo: dict) -> object:
        return self._ask("deepcopy")

    def __reduce_ex__(self, protocol: int) -> tuple:
        return (_pickled_copy, (self._id,))  # unpickled: a copy made by pickle in the answer process


def _with_grad(data, requires_grad: bool, grad, parameter: bool):
    import torch

    value = torch.nn.Parameter(data, requires_grad) if parameter else data.requires_grad_(requires_grad)
    value.grad = grad
    return value


def _pickled_copy(handle_id: int) -> object:
    return _CURRENT[-1].request("pickle", handle_id, ())


class _ToAnswer(pickle.Pickler):
    def __init__(self, file: io.BytesIO, answer: Answer) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.answer = answer

    def reducer_override(self, obj: object) -> object:
        """Tensors keep their ``.grad`` (pickling drops it): averaging gradients needs them."""
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) in (torch.Tensor, torch.nn.Parameter) and obj.is_leaf \
                and obj.grad is not None:
            return (_with_grad, (obj.detach(), obj.requires_grad, obj.grad.detach(),
                                 type(obj) is torch.nn.Parameter))
        return NotImplemented

    def persistent_id(self, obj: object) -> tuple | None:
        if type(obj) is Remote:
            return ("H", object.__getattribute__(obj, "_id"))
        if becomes_peer(obj):
            return ("R", self.answer.peer_id(obj))
        return None


def _skip_on_checker(value: object) -> bool:
    return type(value) is Remote or becomes_peer(value)


def _exception(remote: RemoteException) -> BaseException:
    """The checker's exception for one raised in the answer's process (builtins or imported)."""
    for module, qualname in remote.classes:
        cls = getattr(builtins, qualname, None) if module == "builtins" else claimable(module, qualname)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)) or issubclass(cls, ChannelError):
            continue
        if not issubclass(cls, Exception) and cls is not StopIteration:
            return RuntimeError(f"the answer raised {qualname}: {remote.message}")
        for args in (remote.args, (remote.message,)):
            try:
                return cls(*args)
            except Exception:  # noqa: BLE001 - try the message alone, then the base class
                continue
    return RuntimeError(remote.message)


class Answer:
    """The checker's end of the socket to one answer process."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.remotes, self.peers, self.peer_ids = sock, {}, {}, {}
        _CURRENT.append(self)

    def peer_id(self, obj: object) -> int:
        if id(obj) not in self.peer_ids:
            self.peer_ids[id(obj)] = len(self.peers) + 1
            self.peers[len(self.peers) + 1] = obj
        return self.peer_ids[id(obj)]

    def _remote(self, handle: Handle) -> Remote:
        if handle.id not in self.remotes:
            self.remotes[handle.id] = Remote(self, handle)
        return self.remotes[handle.id]

    def _peer(self, ref: PeerRef) -> object:
        if ref.id not in self.peers:
            raise ChannelError("the answer's process named an object the checker never sent")
        return self.peers[ref.id]

    def _decode(self, tree: object) -> object:
        return decode(tree, self._remote, self._peer)

    def _send(self, message: tuple) -> None:
        file = io.BytesIO()
        _ToAnswer(file, self).dump(message)
        send(self.sock, file.getvalue())

    def hello(self) -> str | None:
        """The answer process's first message: the error its answer cells raised, if any."""
        message = loads_plain(receive(self.sock))
        if type(message) is not tuple or len(message) != 2 or message[0] != "hello":
            raise ChannelError("the answer's process did not start properly")
        return None if message[1] is None else str(message[1])

    def request(self, op: str, target: int, args: tuple) -> object:
        """Ask the answer process; serve its calls back meanwhile; apply what it did to ``args``."""
        mine = leaves(args, _skip_on_checker)
        self._send(("req", op, target, args, rng_state()))
        while True:
            message = loads_plain(receive(self.sock))
            if type(message) is not tuple or not message or message[0] not in ("ret", "req"):
                raise ChannelError("the answer's process sent something that is not a reply")
            if message[0] == "req":
                self._serve(message)
                continue
            if len(message) != 5 or not is_plain(message[3]):
                raise ChannelError("the answer's process sent a malformed reply")
            _, ok, value, states, _ = message  # the answer's random state is its own
            states = self._decode(states)
            if type(states) is not list or len(states) != len(mine):
                raise ChannelError("the answer's process sent the state of other arguments")
            for target_value, state in zip(mine, states, strict=True):
                apply_state(target_value, state)
            value = self._decode(value)
            if ok is not True:
                if type(value) is not RemoteException:
                    raise ChannelError("the answer's process sent a malformed error")
                raise _exception(value)
            return value

    def _serve(self, message: tuple) -> None:
        """A call back from the answer process to one of the checker's own objects."""
        if len(message) != 5 or message[1] not in PEER_OPS or type(message[2]) is not int:
            raise ChannelError("the answer's process sent a malformed call")
        _, op, target, args, _ = message
        obj = self._peer(PeerRef(target))
        args = self._decode(args)
        try:
            if type(args) is not tuple:
                raise ChannelError("malformed arguments")
            if op == "getattr" and (type(args[0]) is not str or args[0].startswith("_")):
                raise AttributeError(f"the checker's objects show public attributes only, not {args[0]!r}")
            value, ok = perform(op, obj, args), True
            if op == "getattr" and becomes_peer(value) and getattr(value, "__self__", None) is not obj:
                raise AttributeError(f"{args[0]!r} is not data or a method of this object")
        except ChannelError:
            raise
        except Exception as error:  # noqa: BLE001 - goes back to the answer as its exception
            value, ok = error, False
        try:
            self._send(("ret", ok, value, rng_state()))
        except Exception as error:  # noqa: BLE001 - e.g. an exception that does not pickle
            self._send(("ret", False, RuntimeError(f"{type(error).__name__}: {error}"), rng_state()))
