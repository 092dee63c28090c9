"""Joining and leaving the process group that ``torchrun`` describes, and small collectives.

The same code runs under plain ``python`` (one process, no process group) and under
``torchrun``, which sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class DistInfo:
    """Who this process is. ``world_size == 1`` and ``initialized == False`` without torchrun.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str | None
    initialized: bool


def setup_distributed(*, device_type: str | None = None) -> DistInfo:
    """Join the process group that ``torchrun`` describes in the environment, if any.

    Picks ``nccl`` with CUDA and ``gloo`` otherwise, and calls ``torch.cuda.set_device``
    before ``init_process_group`` so each rank owns one GPU.

    Args:
        device_type: Force "cpu" or "cuda"; default CUDA when available.

    Returns:
        This process's ``DistInfo``.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    use_cuda = (device_type or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError("device_type='cuda' was requested but CUDA is not available")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if "RANK" not in os.environ:
        return DistInfo(0, 0, 1, device, None, False)
    backend = "nccl" if use_cuda else "gloo"
    dist.init_process_group(backend=backend, device_id=device if use_cuda else None)
    return DistInfo(rank, local_rank, world_size, device, backend, True)


def cleanup_distributed() -> None:
    """Destroy the process group if one exists (call it on every exit path).

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def is_main_process() -> bool:
    """True on rank 0, and in a plain single process.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over all ranks (a no-op copy without a process group).

    Use it for counts and sums (correct predictions, samples seen, summed loss), then
    divide: averaging per-rank means is wrong when ranks see different numbers of samples.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    values = values.clone()
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def gather_objects(obj: object) -> list:
    """Every rank's ``obj``, in rank order (``[obj]`` without a process group).

    Used to print the ranks' lines in a fixed order and to collect each rank's RNG state.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def wrap_model(model: nn.Module, info: DistInfo) -> nn.Module:
    """``DistributedDataParallel(model)`` when a process group exists, else ``model`` itself.

    The model must already be on ``info.device``; with CUDA each rank's DDP uses its own GPU.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    if not info.initialized:
        return model
    return DistributedDataParallel(model, device_ids=[info.device] if info.device.type == "cuda"
                                   else None)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside a ``DistributedDataParallel`` (or the model itself).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return model.module if isinstance(model, DistributedDataParallel) else model


def run_in_process_group(train: Callable[[Any, DistInfo], Any], config: Any, *,
                         errors: tuple[type[Exception], ...]) -> int:
    """Join the process group, ``train(config, info)``, always leave it; the exit code of a ``main``.

    An expected error (``errors``: a bad snapshot or checkpoint, a missing file, a bad value)
    is printed as one line naming the rank and gives exit status 2, without a traceback.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    info = setup_distributed()
    try:
        train(config, info)
    except errors as error:
        print(f"rank {info.rank}: error: {error}", file=sys.stderr, flush=True)
        return 2
    finally:
        cleanup_distributed()
    return 0
