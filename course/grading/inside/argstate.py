"""What a call did to its arguments: found, captured in the answer's process, applied in the checker's.

Arguments travel to the answer's process as copies. The tensors, models, optimizers, random
generators and writable arrays among them (``leaves``: in lists, tuples and dicts too, in an
order both processes agree on) are the ones a check may look at afterwards: ``w.grad``,
``model.training``, BatchNorm statistics, an optimizer's momentum, a generator's position.
``state_of`` captures each after the call; the reply carries them as data, and ``apply_state``
puts them into the checker's originals in place.
"""

from __future__ import annotations

import sys

from course.grading.inside.channel import ChannelError


def _kind(value: object) -> str | None:
    """Which argument states travel back: tensors, models, optimizers, generators, arrays."""
    torch = sys.modules.get("torch")
    if torch is not None:
        if isinstance(value, torch.Tensor):
            return "t"
        if isinstance(value, torch.nn.Module):
            return "m"
        if isinstance(value, torch.optim.Optimizer):
            return "o"
        if isinstance(value, torch.Generator):
            return "g"
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray) and value.flags.writeable:
        return "a"
    return None


def leaves(value: object, skip, found: list | None = None, seen: set | None = None,
           depth: int = 0) -> list:
    """The arguments whose state comes back, in an order both processes agree on."""
    found, seen = ([], set()) if found is None else (found, seen)
    if id(value) in seen or depth > 6 or skip(value):
        return found
    seen.add(id(value))
    if type(value) in (list, tuple):
        for item in value:
            leaves(item, skip, found, seen, depth + 1)
    elif type(value) is dict:
        for item in value.values():
            leaves(item, skip, found, seen, depth + 1)
    elif _kind(value):
        found.append(value)
    return found


def state_of(value: object) -> tuple:
    """The answer side: what a call left in one of its arguments (encoded with the reply)."""
    kind = _kind(value) or "?"
    if kind == "t":
        grad = None if value.grad is None else value.grad.detach()
        return ("t", value.detach(), grad, bool(value.requires_grad))
    if kind == "m":
        tensors = [(k, v.detach()) for k, v in value.state_dict(keep_vars=True).items()]
        grads = [(None if p.grad is None else p.grad.detach(), bool(p.requires_grad))
                 for p in value.parameters()]
        return ("m", tensors, [bool(m.training) for m in value.modules()], grads)
    if kind == "o":
        return ("o", value.state_dict())
    if kind == "g":
        return ("g", value.get_state())
    return ("a", value)


def _put(target, value) -> None:
    import torch

    if not isinstance(value, torch.Tensor):
        raise ChannelError("the answer's process sent a tensor state that is not a tensor")
    with torch.no_grad():
        if target.shape == value.shape and target.dtype == value.dtype:
            if not torch.equal(target, value.to(target.device)):
                target.copy_(value)
        else:
            target.data = value.to(target.device)


def _set_grad(target, grad, requires_grad: bool) -> None:
    if target.is_leaf:
        if target.requires_grad != requires_grad:
            target.requires_grad_(requires_grad)
        target.grad = None if grad is None else grad.to(target.device)


def apply_state(target: object, state: tuple) -> None:
    """The checker side: give one of its own arguments the state the answer left in it."""
    kind = _kind(target)
    if type(state) is not tuple or not state or state[0] != kind:
        raise ChannelError("the answer's process sent the state of a different argument")
    if kind == "t":
        _put(target, state[1])
        _set_grad(target, state[2], bool(state[3]))
    elif kind == "m":
        tensors = target.state_dict(keep_vars=True)
        if [k for k, _ in state[1]] != list(tensors):
            raise RuntimeError("the answer changed the layers of a model it was given")
        for key, value in state[1]:
            _put(tensors[key], value)
        modules, params = list(target.modules()), list(target.parameters())
        if len(state[2]) != len(modules) or len(state[3]) != len(params):
            raise RuntimeError("the answer changed the layers of a model it was given")
        for module, training in zip(modules, state[2], strict=True):
            module.training = bool(training)
        for param, (grad, requires_grad) in zip(params, state[3], strict=True):
            _set_grad(param, grad, bool(requires_grad))
    elif kind == "o":
        target.load_state_dict(state[1])
    elif kind == "g":
        target.set_state(state[1])
    else:
        target[...] = state[1]
