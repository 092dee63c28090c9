"""The data-only channel from a student's answer process to its checker: framing and a safe unpickler.

Whatever the answer process sends is untrusted (the threat model: ``course/grading/__init__.py``). It is encoded as a tree of plain values
(``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, tuples, lists and dicts of them),
pickled, and read back by :class:`_Plain`, an unpickler that refuses every global: no class
can be looked up, so nothing can be constructed or called while reading (the restricted
unpickler of the ``pickle`` documentation, restricted to nothing). :func:`decode` then builds
the few value types the checks compare, from their bytes, with exact types (``codec``):
a tensor is a ``torch.Tensor`` made by ``torch.frombuffer``, never an object of the student's
class. Anything else the answer returns becomes a :class:`Handle`, an id the checker can only
ask the answer process about (see ``remote``).
"""

from __future__ import annotations

import io
import pickle
import socket
import struct
from dataclasses import dataclass

#: Largest message either side accepts (a submission's output beyond it is an error, not memory).
MAX_BYTES = 256 * 2**20
#: Longest text (an error, a check's message) that one exercise's result carries to the report.
MAX_MESSAGE = 400
MAX_DEPTH = 40


class ChannelError(BaseException):
    """The answer process died or sent something that is not a valid message.

    A ``BaseException``, so that a check's ``except Exception`` cannot swallow it.
    """


@dataclass(frozen=True)
class Handle:
    """An object that stays in the answer process: its id and its classes (module, qualname)."""

    id: int
    classes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class PeerRef:
    """One of the checker's own objects, handed back by the answer process."""

    id: int


@dataclass(frozen=True)
class RemoteException:
    """An exception raised in the answer process: its classes, message and data arguments."""

    classes: tuple[tuple[str, str], ...]
    message: str
    args: tuple


def send(sock: socket.socket, payload: bytes) -> None:
    """One message: an 8-byte length, then the payload."""
    try:
        sock.sendall(struct.pack("!Q", len(payload)))
        sock.sendall(payload)
    except OSError as error:
        raise ChannelError(f"the answer's process ended (or closed the channel): {error}") from None


def _exactly(sock: socket.socket, size: int) -> bytearray:
    buffer, got = bytearray(size), 0
    view = memoryview(buffer)
    while got < size:
        try:
            n = sock.recv_into(view[got:], size - got)
        except OSError:
            n = 0
        if n == 0:
            raise ChannelError("the answer's process ended (or closed the channel)")
        got += n
    return buffer


def receive(sock: socket.socket) -> bytearray:
    """The next message's payload; ``ChannelError`` if the peer is gone or it is too large."""
    (size,) = struct.unpack("!Q", _exactly(sock, 8))
    if size > MAX_BYTES:
        raise ChannelError(f"the answer's process sent {size / 2**20:.0f} MiB, more than "
                           f"{MAX_BYTES // 2**20} MiB")
    return _exactly(sock, size)


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # refuses every global
        raise ChannelError(f"the answer's process sent a reference to {module}.{name}")

    def persistent_load(self, pid):
        raise ChannelError("the answer's process sent a persistent reference")


def loads_plain(payload: bytes) -> object:
    """Unpickle plain values only (no globals, no persistent ids)."""
    try:
        return _Plain(io.BytesIO(payload)).load()
    except ChannelError:
        raise
    except Exception as error:  # noqa: BLE001 - any malformed pickle is the sender's fault
        raise ChannelError(f"the answer's process sent a malformed message ({type(error).__name__})") from None
