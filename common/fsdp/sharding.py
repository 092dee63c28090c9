"""Sharding a model with FSDP2 (``fully_shard``), and counting the bytes each rank holds.

DDP keeps a full copy of the parameters, the gradients and the optimizer state on every
rank. FSDP2 keeps only a shard of each (``Shard(0)`` of every parameter, as a ``DTensor``),
gathers a unit's full parameters just before its forward and backward, and
reduce-scatters its gradients afterwards. The byte counts here come from the local
tensors a rank really holds (``DTensor.to_local()``), not from guesses.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

#: Modules that become one FSDP unit each in ``shard_model`` (the root takes the rest).
UNIT_TYPES: tuple[type[nn.Module], ...] = (nn.Conv2d, nn.Linear, nn.GroupNorm)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The part of ``tensor`` this rank stores: ``to_local()`` of a DTensor, else the tensor.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def shard_model(model: nn.Module, *, units: Iterable[nn.Module] | None = None,
                reshard_after_forward: bool | int | None = None,
                mp_policy: MixedPrecisionPolicy | None = None) -> nn.Module:
    """``fully_shard`` every unit (bottom-up), then the root; returns the same model, sharded.

    Each unit is gathered and freed on its own, so at most one unit's full parameters (plus
    a prefetched next one) exist at a time. The root's ``fully_shard`` covers the
    parameters that belong to no unit. ``reshard_after_forward`` applies to the units; the
    root always gets torch's own choice (``None``: ``False`` for the root, whose parameters
    backward needs first, so re-gathering them right away would be wasted).

    Args:
        model: The model, already on its device; it needs a default process group.
        units: Submodules to shard separately (default: every ``UNIT_TYPES`` module).
        reshard_after_forward: For the units: ``True`` (what ``None`` means for a non-root
            module) frees the gathered parameters after forward (ZeRO-3); ``False`` keeps
            them until backward (ZeRO-2-like: more memory, one all-gather fewer).
        mp_policy: e.g. ``MixedPrecisionPolicy(param_dtype=torch.bfloat16)`` on GPUs.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    extra = {"mp_policy": mp_policy} if mp_policy is not None else {}
    chosen = list(units) if units is not None else [
        m for m in model.modules() if isinstance(m, UNIT_TYPES) and m is not model]
    for unit in reversed(chosen):  # bottom-up, as fully_shard expects
        fully_shard(unit, reshard_after_forward=reshard_after_forward, **extra)
    fully_shard(model, reshard_after_forward=None, **extra)
    return model


def placements(model: nn.Module) -> list[dict]:
    """One row per parameter: name, global shape, placements, and the local shard's shape.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    rows = []
    for name, param in model.named_parameters():
        where = (", ".join(str(p) for p in param.placements) if isinstance(param, DTensor)
                 else "full copy")
        rows.append({"parameter": name, "global_shape": tuple(param.shape), "placements": where,
                     "local_shape": tuple(local(param.data).shape)})
    return rows


def _nbytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(local(t).numel() * local(t).element_size() for t in tensors)


def local_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state that this rank holds locally.

    Counts ``numel * element_size`` of each local tensor (a DTensor's local shard), so
    the figures are what the rank really allocated for them, the same under DDP, FSDP or
    one process. Gradients count only where they exist (measure after ``backward``).

    Returns:
        ``{"parameters": ..., "gradients": ..., "optimizer": ..., "total": ...}``.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    params = list(model.parameters())
    counts = {"parameters": _nbytes(p.data for p in params),
              "gradients": _nbytes(p.grad for p in params if p.grad is not None),
              "optimizer": 0}
    if optimizer is not None:
        counts["optimizer"] = _nbytes(value for state in optimizer.state.values()
                                      for value in state.values() if torch.is_tensor(value))
    counts["total"] = sum(counts.values())
    return counts


def bytes_per_rank(num_params: int, *, world_size: int, stage: int,
                   param_bytes: int = 4, optimizer_bytes: int = 8) -> int:
    """Bytes per rank of parameters + gradients + optimizer state, on paper.

    ``stage`` 0 is DDP (everything replicated); ZeRO stage 1 shards the optimizer state,
    stage 2 also the gradients, stage 3 (FSDP's ``fully_shard``) also the parameters.
    AdamW in float32 keeps two moments: ``optimizer_bytes=8`` per parameter.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0 (DDP) or a ZeRO stage 1-3, got {stage}")
    # Stage s shards the first s of these: optimizer state, then gradients, then parameters.
    parts = (optimizer_bytes, param_bytes, param_bytes)
    per_param = sum(b / world_size if i < stage else b for i, b in enumerate(parts))
    return round(num_params * per_param)
