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

from common.cli import error_line, one_line
from common.device import device_plan_from_env


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

    The device and backend come from ``common.device.device_plan_from_env``: each rank on a
    host its own GPU with ``nccl`` when the host has enough, else every rank on the CPU with
    ``gloo`` (rank 0 prints the reason once, to stderr). ``torch.cuda.set_device`` comes
    before ``init_process_group``, and ``device_id`` is given only to NCCL.

    Args:
        device_type: Force "cpu" or "cuda" (wins over ``COMPANION_DEVICE``); default: the plan.

    Returns:
        This process's ``DistInfo``.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    plan = device_plan_from_env(prefer=device_type)
    if plan.device.type == "cuda":
        torch.cuda.set_device(plan.device)
    if "RANK" not in os.environ:
        return DistInfo(0, 0, 1, plan.device, None, False)
    rank, world_size = int(os.environ["RANK"]), int(os.environ.get("WORLD_SIZE", "1"))
    if rank == 0 and plan.reason:
        print(f"device plan: {plan.reason}", file=sys.stderr, flush=True)
    dist.init_process_group(backend=plan.backend,
                            device_id=plan.device if plan.backend == "nccl" else None)
    return DistInfo(rank, int(os.environ.get("LOCAL_RANK", "0")), world_size, plan.device,
                    plan.backend, True)


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


#: What a collective raises on the ranks still running when a peer has exited (gloo, NCCL).
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "NCCL communicator was aborted", "remote process exited")


def peer_failed(error: BaseException) -> bool:
    """Whether ``error`` says a collective lost a peer process (it exited or was killed).

    Introduced in docs/scripts.md ("Your own images").
    """
    return any(text in str(error) for text in _PEER_GONE)


def run_in_process_group(train: Callable[[Any, DistInfo], Any], config: Any, *,
                         errors: tuple[type[Exception], ...]) -> int:
    """Join the process group, ``train(config, info)``, always leave it; the exit code of a ``main``.

    An expected error (``errors``: a bad snapshot or checkpoint, a missing file, a bad value)
    is printed as one line naming the rank and gives exit status 2, without a traceback.

    A rendezvous that cannot be made (``MASTER_PORT`` taken by another program, an address that
    does not answer) is one such line too, naming ``MASTER_ADDR:MASTER_PORT``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    try:
        info = setup_distributed()
    except dist.DistNetworkError as error:
        where = f"MASTER_ADDR:MASTER_PORT {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        error_line(f"rank {os.environ.get('RANK', 0)}: error: cannot make the rendezvous at "
                   f"{where}: {one_line(str(error))}")
        return 2
    try:
        train(config, info)
    except errors as error:
        error_line(f"rank {info.rank}: error: {one_line(str(error))}")
        return 2
    except RuntimeError as error:  # dist.DistBackendError is one
        if info.world_size < 2 or not peer_failed(error):
            raise
        # Another rank stopped first (its own line says why, e.g. the file it could not read):
        # one line here too, not the collective's traceback.
        error_line(f"rank {info.rank}: stopped: another rank of the job failed first (its error "
                   "says why)")
        return 2
    finally:
        cleanup_distributed()
    return 0
