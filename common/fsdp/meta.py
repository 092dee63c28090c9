"""A model bigger than one device: built on the meta device, sharded, then filled.

Built under ``torch.device("meta")`` a module has parameters with shapes and dtypes but no
storage, so even a model that fits no single device can be built; ``fully_shard`` cuts it
into ``Shard(0)`` pieces from the shapes alone. Then each rank allocates only its shards
(``to_empty``) and fills them: ``materialize`` runs every module's own
``reset_parameters()`` (a fresh start), and ``load_full_state_dict`` broadcasts rank 0's
full state dict into the shards (a pretrained model, or one saved with ``torch.save``).

The hardening over the four lines a tutorial writes: ``to_empty`` leaves memory
uninitialised, so a module that holds tensors but has no ``reset_parameters`` would keep
whatever the memory held; ``materialize`` refuses such a model, naming each module, before
it allocates anything. And a full state dict that does not fit the model (a key missing,
one too many, another shape) makes ``set_model_state_dict(..., broadcast_from_rank0=True)``
fail on rank 0 with an error that names no key while the other ranks wait in the
broadcast; ``load_full_state_dict`` checks on rank 0 first and raises the same
``ValueError``, naming the keys, on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

#: How many keys of each kind a mismatch message names before it just counts.
SHOWN_KEYS = 5


def _holds_tensors(module: nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False)) or any(
        True for _ in module.buffers(recurse=False))


def materialize(model: nn.Module, device: torch.device | str) -> nn.Module:
    """Allocate a meta-device (sharded) model on ``device``; run each module's ``reset_parameters``.

    Every module that holds parameters or buffers of its own must have a
    ``reset_parameters()``; the modules without one are named in the error and nothing is
    allocated. In one process, with the same seed, the result equals an ordinary build. On
    ranks of a CPU device mesh DTensor's random operators are not offset per shard, so ranks
    seeded alike draw the same numbers for their shards: load a full state dict instead when
    the initial weights must equal one process's.

    Raises:
        ValueError: Naming each module (path and type) that has no ``reset_parameters``.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    unresettable = [f"'{name}' ({type(module).__name__})" if name else type(module).__name__
                    for name, module in model.named_modules()
                    if _holds_tensors(module)
                    and not callable(getattr(module, "reset_parameters", None))]
    if unresettable:
        raise ValueError(f"cannot initialise after to_empty: module(s) {', '.join(unresettable)} "
                         "hold parameters or buffers of their own but have no reset_parameters(), "
                         "so they would keep whatever the memory held; give each a "
                         "reset_parameters() that sets what its __init__ sets. Nothing was "
                         "allocated")
    model.to_empty(device=device)
    with torch.no_grad():
        for module in model.modules():
            if _holds_tensors(module):
                module.reset_parameters()
    return model


def _listed(keys: list[str]) -> str:
    more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
    return ", ".join(keys[:SHOWN_KEYS]) + more


def state_mismatch(model: nn.Module, full_state: Mapping[str, object] | None, *,
                   source: str = "the full state dict") -> str:
    """Why ``full_state`` cannot be loaded into ``model`` (``""``: it fits).

    Compares names and global shapes (a DTensor's ``shape`` is the full tensor's).

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    if full_state is None:
        return f"{source}: rank 0 passed no state dict (None); rank 0 must hold the full one"
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()
                if torch.is_tensor(value)}
    given = {key: tuple(value.shape) for key, value in full_state.items()
             if torch.is_tensor(value)}
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    shapes = [f"{key} {given[key]} (model {expected[key]})"
              for key in sorted(set(given) & set(expected)) if given[key] != expected[key]]
    problems = [f"{label} {len(keys)}: {_listed(keys)}" for label, keys in
                (("missing", missing), ("unexpected", unexpected), ("other shapes", shapes))
                if keys]
    if not problems:
        return ""
    return (f"{source} does not fit this model ({type(model).__name__}): " + "; ".join(problems)
            + ". Nothing was loaded")


def _from_rank0(value: str) -> str:
    if not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def load_full_state_dict(model: nn.Module, full_state: Mapping[str, object] | None, *,
                         source: str = "the full state dict") -> None:
    """Load rank 0's full (unsharded) state dict into ``model`` on every rank, in place.

    Rank 0 passes the full state dict (e.g. ``torch.load(..., mmap=True, weights_only=True)``);
    the other ranks pass ``None`` and receive their shards by broadcast, so only rank 0 ever
    holds the whole model. Without a process group it is ``load_state_dict`` after the same
    check. A collective: every rank calls it.

    Raises:
        ValueError: On every rank, if rank 0's dict misses keys of the model, has others, or
            other shapes (``state_mismatch``, naming ``source`` and the keys).

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    distributed = dist.is_available() and dist.is_initialized()
    rank0 = not distributed or dist.get_rank() == 0
    problem = _from_rank0(state_mismatch(model, full_state, source=source) if rank0 else "")
    if problem:
        raise ValueError(problem)
    if not distributed:
        model.load_state_dict(dict(full_state))
        return
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, dict(full_state) if rank0 else {}, options=options)
