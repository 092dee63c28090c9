"""What either end of an exercise's answer socket does for the other: the checker (``remote``) and
the answer process (``answer``) both perform requests on their own objects, and every request
carries the random state of the side that sent it.

Apart from both ends, so that neither imports the other's module. The random generators travel
one way: the checker's state goes with each request, so ``torch.manual_seed`` in a check seeds
the answer's draws, and the answer's draws never move the checker's generators.
"""

from __future__ import annotations

import copy
import pickle
import random
import sys

from course.grading.inside.channel import ChannelError


def rng_state() -> tuple:
    """The checker's random state, sent with every request: each call starts from it. One way
    only: the answer's draws (or seeds) never move the checker's generators."""
    state = [random.getstate()]
    if "numpy" in sys.modules:
        state.append(sys.modules["numpy"].random.get_state())
    if "torch" in sys.modules:
        state.append(sys.modules["torch"].get_rng_state())
    return tuple(state)


def set_rng_state(state: tuple | None) -> None:
    """Take the random state a request brought (``rng_state`` of the other side); None: keep."""
    if state is None:
        return
    try:
        random.setstate(state[0])
        if len(state) > 1 and "numpy" in sys.modules:
            sys.modules["numpy"].random.set_state(state[1])
        if len(state) > 2 and "torch" in sys.modules:
            sys.modules["torch"].set_rng_state(state[2])
    except (TypeError, ValueError, RuntimeError, IndexError) as error:
        raise ChannelError(f"the answer's process sent an invalid random state ({error})") from None


def perform(op: str, obj: object, args: tuple) -> object:
    """Do one request on an object (either side)."""
    if op == "call":
        return obj(*args[0], **args[1])
    if op == "getattr":
        return getattr(obj, args[0])
    if op == "setattr":
        setattr(obj, args[0], args[1])
        return None
    if op == "getitem":
        return obj[args[0]]
    if op == "len":
        return len(obj)
    if op == "iter":
        return iter(obj)
    if op == "next":
        return next(obj)
    if op == "contains":
        return args[0] in obj
    if op == "repr":
        return repr(obj)
    if op == "str":
        return str(obj)
    if op == "copy":
        return copy.copy(obj)
    if op == "deepcopy":
        return copy.deepcopy(obj)
    if op == "pickle":
        return pickle.loads(pickle.dumps(obj))  # the answer's own object, in its process
    raise ValueError(f"unknown request {op!r}")
