"""The data-only codec of the channel: a value as a tree of plain values, and back, with exact types.

``encode`` runs in the answer's process: data becomes tagged tuples of primitives (a tensor
is its dtype, shape and bytes), anything else a handle. ``decode`` runs in the checker, on a
tree that ``channel.loads_plain`` read: it rebuilds tensors with ``torch.frombuffer``,
arrays with ``np.frombuffer`` and images with ``Image.frombytes`` from bytes that must match
their shape, and refuses anything malformed with ``ChannelError``.
"""

from __future__ import annotations

import math
import pathlib
import sys
from collections import OrderedDict

from course.grading.inside.channel import MAX_DEPTH, ChannelError, Handle, PeerRef, RemoteException

#: Modules whose classes a handle or an exception may claim to be (the checker imports nothing new).
_NOT_CLAIMABLE = ("__main__", "builtins", "course")


def _classes(cls: type) -> tuple[tuple[str, str], ...]:
    return tuple((str(c.__module__), str(c.__qualname__)) for c in cls.__mro__)[:32]


def _tensor(value) -> tuple:
    import torch

    flat = value.detach().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return ("T", str(value.dtype).removeprefix("torch."), tuple(value.shape), raw,
            bool(value.requires_grad), value.device.type)


def _plain_tensor(value, torch):
    """``value`` as a plain strided ``torch.Tensor`` (a subclass's data, without its methods), or None.

    Runs in the answer's process: whatever a subclass's code does here, what is sent is bytes,
    rebuilt in the checker as a ``torch.Tensor``.
    """
    try:
        with torch._C.DisableTorchFunctionSubclass():
            plain = value if type(value) in (torch.Tensor, torch.nn.Parameter) \
                else torch.Tensor.as_subclass(value, torch.Tensor)
            if type(plain) is not torch.Tensor and type(plain) is not torch.nn.Parameter:
                return None
            if plain.layout != torch.strided or plain.is_quantized or plain.is_meta:
                return None
            return plain
    except Exception:  # noqa: BLE001 - a subclass without data (e.g. a wrapper): stays a handle
        return None


def _module_of(value: object) -> str:
    return type(value).__module__ or ""


def encode(value: object, register, peer_id, depth: int = 0) -> object:
    """The plain tree for ``value``; objects that are not data become ``("H", id, classes)``.

    ``register(obj)`` gives an object's handle id, ``peer_id(obj)`` the checker's id for one of
    its own objects (or None).
    """
    if depth > MAX_DEPTH:
        raise ValueError("the value is nested too deeply to be sent to the checker")
    kind = type(value)
    if value is None or kind in (bool, int, float, str, bytes):
        return value
    if value is Ellipsis:
        return ("E",)
    if kind is complex:
        return ("c", value.real, value.imag)
    if kind in (tuple, list):
        return ("L" if kind is list else "U", [encode(v, register, peer_id, depth + 1) for v in value])
    if kind in (dict, OrderedDict):
        items = [[encode(k, register, peer_id, depth + 1), encode(v, register, peer_id, depth + 1)]
                 for k, v in value.items()]
        return ("M" if kind is dict else "O", items)
    if kind in (set, frozenset):
        return ("Z" if kind is set else "F", [encode(v, register, peer_id, depth + 1) for v in value])
    if kind is range:
        return ("r", value.start, value.stop, value.step)
    if isinstance(value, pathlib.PurePath):
        return ("P", str(value))
    pid = peer_id(value)
    if pid is not None:
        return ("R", pid)
    module = _module_of(value)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):  # a subclass too: sent as its data
        plain = _plain_tensor(value, torch)
        return ("H", register(value), ()) if plain is None else _tensor(plain)
    if module.startswith("torch") and torch is not None:
        if kind is torch.Size:
            return ("S", [int(v) for v in value])
        if kind is torch.dtype:
            return ("t", str(value).removeprefix("torch."))
        if kind is torch.device:
            return ("d", str(value))
    if "numpy" in sys.modules:
        import numpy as np

        if isinstance(value, np.ndarray) and not value.dtype.hasobject and value.dtype.fields is None:
            data = np.ascontiguousarray(value)
            return ("A", data.dtype.str, data.shape, data.tobytes(), bool(value.flags.writeable))
        if isinstance(value, np.generic) and not value.dtype.hasobject and value.dtype.fields is None:
            return ("a", value.dtype.str, value.tobytes())
        if kind is np.dtype and not value.hasobject and value.fields is None:
            return ("D", value.str)
    if module.startswith("PIL.") and "PIL.Image" in sys.modules:
        from PIL import Image

        if isinstance(value, Image.Image) and value.mode in _PIL_MODES:
            return ("I", value.mode, tuple(value.size), value.tobytes())
    return _subclass(value, register, peer_id, depth) or ("H", register(value), _classes(kind))


def _subclass(value: object, register, peer_id, depth: int) -> object:
    """A namedtuple, an ``int`` subclass...: sent as its plain value, whatever its class overrides.

    The conversion runs here, in the answer's process; the checker compares plain values.
    """
    for base in (int, float, complex, str, bytes):  # (bool has no subclasses)
        if isinstance(value, base):
            return encode(base(value), register, peer_id, depth + 1)
    for base in (tuple, list, dict, set, frozenset):
        if isinstance(value, base):
            plain = base(value.items()) if base is dict else base(value)
            return encode(plain, register, peer_id, depth + 1)
    return None


_PIL_MODES = ("1", "L", "P", "RGB", "RGBA", "CMYK", "YCbCr", "LA", "I", "F", "I;16")


def encode_exception(error: BaseException, register, peer_id) -> tuple:
    """``("X", classes, message, args)``: the arguments only when they are plain data.
    """
    message = str(error)[:2000]
    try:
        args = encode(tuple(error.args), register, peer_id)
        if not is_plain(args):
            args = ("U", [message])
    except Exception:  # noqa: BLE001 - odd arguments: keep the message
        args = ("U", [message])
    return ("X", _classes(type(error)), message, args)


def is_plain(tree: object) -> bool:
    """True if ``tree`` holds no handle: plain data all the way down."""
    if isinstance(tree, tuple) and tree and tree[0] == "H":
        return False
    if isinstance(tree, tuple | list):
        return all(is_plain(t) for t in tree)
    return True


def claimable(module: str, qualname: str) -> type | None:
    """The checker's class ``module.qualname`` if it is already imported and may be claimed."""
    if not module or module.split(".")[0] in _NOT_CLAIMABLE or module not in sys.modules:
        return None
    found: object = sys.modules[module]
    for part in qualname.split("."):
        if part == "<locals>":
            return None
        found = getattr(found, part, None)
    return found if isinstance(found, type) else None


#: ``Py_TPFLAGS_HEAPTYPE``: set on classes made by ``class`` statements, clear on C's static types.
_HEAPTYPE = 1 << 9
#: Classes with a C layout or C-level readers that no handle may claim (beyond the static types).
_C_UNPACKED = (("torch", "Tensor"), ("PIL.Image", "Image"), ("numpy", "ndarray"), ("numpy", "generic"))


def claimable_by_handle(module: str, qualname: str) -> type | None:
    """The class a handle may claim (``isinstance`` in the checks): ``claimable`` and pure Python.

    C code unpacks an object it believes to be of a C type (``THPVariable_Check`` honours
    ``__class__``): a handle claiming ``torch.Tensor`` would be read as a tensor's memory. So
    every class of the claimed one's MRO but ``object`` must be made by a ``class`` statement,
    with no C type below it (``torch.Tensor`` has ``TensorBase``, arrays and NumPy scalars are C
    types, an image is read by C code): ``nn.Module``, ``Dataset``, ``Optimizer`` may be claimed.
    """
    cls = claimable(module, qualname)
    if cls is None or issubclass(cls, BaseException):
        return None
    for base in cls.__mro__:
        if base is object:
            continue
        if not base.__flags__ & _HEAPTYPE or base.__module__ == "builtins":
            return None
    for c_module, c_name in _C_UNPACKED:
        found = getattr(sys.modules.get(c_module), c_name, None)
        if isinstance(found, type) and issubclass(cls, found):
            return None
    return cls


def decode(tree: object, handle, peer, depth: int = 0) -> object:
    """The value for a plain tree; ``handle(Handle)`` and ``peer(PeerRef)`` give their objects.

    Raises ``ChannelError`` for anything that is not a well-formed tree.
    """
    if depth > MAX_DEPTH + 4:
        raise ChannelError("the answer's process sent a value nested too deeply")
    if tree is None or type(tree) in (bool, int, float, str, bytes):
        return tree
    try:
        if type(tree) is not tuple:  # a tagged node is a tuple; a list is only ever a payload
            raise ChannelError("the answer's process sent a malformed value")
        tag, *rest = tree
        return _DECODERS[tag](rest, handle, peer, depth)
    except ChannelError:
        raise
    except Exception as error:  # noqa: BLE001 - malformed trees
        raise ChannelError(f"the answer's process sent a malformed value ({type(error).__name__}: "
                           f"{str(error)[:100]})") from None


def _items(rest, handle, peer, depth):
    return [decode(v, handle, peer, depth + 1) for v in _list(rest[0])]


def _list(value: object) -> list:
    if type(value) is not list:
        raise ChannelError("the answer's process sent a malformed container")
    return value


def _pairs(rest, handle, peer, depth):
    return [(decode(k, handle, peer, depth + 1), decode(v, handle, peer, depth + 1))
            for k, v in _list(rest[0])]


def _decode_tensor(rest, handle, peer, depth):
    import torch

    dtype_name, shape, raw, requires_grad, device = rest
    dtype = getattr(torch, dtype_name)
    if not isinstance(dtype, torch.dtype) or type(raw) is not bytes:
        raise ChannelError("a malformed tensor")
    shape = tuple(int(s) for s in shape)
    if len(raw) != math.prod(shape) * dtype.itemsize:  # never memory the checker did not fill
        raise ChannelError("a tensor whose bytes do not match its shape")
    if not raw:
        value = torch.zeros(shape, dtype=dtype)
    else:
        value = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    if device == "cuda" and torch.cuda.is_available():
        value = value.to("cuda")
    return value.requires_grad_(bool(requires_grad)) if requires_grad else value


def _decode_array(rest, handle, peer, depth):
    import numpy as np

    dtype, shape, raw, writeable = rest
    dtype = np.dtype(str(dtype))
    if dtype.hasobject or type(raw) is not bytes:
        raise ChannelError("a malformed array")
    shape = tuple(int(s) for s in shape)
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise ChannelError("an array whose bytes do not match its shape")
    array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    array.flags.writeable = bool(writeable)
    return array


def _decode_scalar(rest, handle, peer, depth):
    import numpy as np

    dtype = np.dtype(str(rest[0]))
    if dtype.hasobject or type(rest[1]) is not bytes or len(rest[1]) != dtype.itemsize:
        raise ChannelError("a malformed scalar")
    return np.frombuffer(rest[1], dtype=dtype)[0]


def _decode_image(rest, handle, peer, depth):
    from PIL import Image

    mode, size, raw = rest
    if mode not in _PIL_MODES:
        raise ChannelError("a malformed image")
    return Image.frombytes(mode, (int(size[0]), int(size[1])), raw)


def _torch_attr(name: str, kind: str) -> object:
    import torch

    value = getattr(torch, str(name))
    if type(value).__name__ != kind:
        raise ChannelError(f"torch.{name} is not a {kind}")
    return value


def _classes_of(value: object) -> tuple[tuple[str, str], ...]:
    return tuple((str(m), str(q)) for m, q in _list(list(value)))


def _decode_exception(rest, handle, peer, depth):
    classes, message, args = rest
    return RemoteException(_classes_of(classes), str(message), tuple(decode(args, handle, peer, depth + 1)))


def _decode_tuple(rest, handle, peer, depth):
    return tuple(_items(rest, handle, peer, depth))


def _decode_set(rest, handle, peer, depth):
    return set(_items(rest, handle, peer, depth))


def _decode_frozenset(rest, handle, peer, depth):
    return frozenset(_items(rest, handle, peer, depth))


def _decode_size(rest, handle, peer, depth):
    import torch

    return torch.Size([int(v) for v in _list(rest[0])])


def _decode_np_dtype(rest, handle, peer, depth):
    import numpy as np

    dtype = np.dtype(str(rest[0]))
    if dtype.hasobject:
        raise ChannelError("a malformed dtype")
    return dtype


def _decode_handle(rest, handle, peer, depth):
    return handle(Handle(int(rest[0]), _classes_of(rest[1])))


_DECODERS = {
    "E": lambda rest, *_: Ellipsis,
    "c": lambda rest, *_: complex(float(rest[0]), float(rest[1])),
    "L": _items,
    "U": _decode_tuple,
    "M": lambda rest, h, p, d: dict(_pairs(rest, h, p, d)),
    "O": lambda rest, h, p, d: OrderedDict(_pairs(rest, h, p, d)),
    "Z": _decode_set,
    "F": _decode_frozenset,
    "r": lambda rest, *_: range(int(rest[0]), int(rest[1]), int(rest[2])),
    "P": lambda rest, *_: pathlib.Path(str(rest[0])),
    "R": lambda rest, h, p, d: p(PeerRef(int(rest[0]))),
    "T": _decode_tensor,
    "S": _decode_size,
    "t": lambda rest, *_: _torch_attr(rest[0], "dtype"),
    "d": lambda rest, *_: __import__("torch").device(str(rest[0])),
    "A": _decode_array,
    "a": _decode_scalar,
    "D": _decode_np_dtype,
    "I": _decode_image,
    "H": _decode_handle,
    "X": _decode_exception,
}
