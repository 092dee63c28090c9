"""Device choice and seeding: the two lines at the top of every notebook.

``get_device`` picks the device of one process; ``plan_device`` picks the device and the
process-group backend of one rank among several (the plan every distributed entry point
follows, through ``common.ddp.setup_distributed``).
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

#: Set by a launcher that starts several single-worker ``torchrun`` agents on one host (the
#: elastic runs of chapter 6.4): how many ranks share this host's GPUs. Each agent's worker
#: sees LOCAL_RANK=0 and LOCAL_WORLD_SIZE=1, so without it every worker would take cuda:0.
RANKS_PER_HOST_ENV = "COMPANION_RANKS_PER_HOST"


def get_device(prefer: str | None = None) -> torch.device:
    """Pick the best available device: CUDA, then Apple MPS, then the CPU.

    Args:
        prefer: Force a device ("cpu", "cuda", "cuda:1", "mps"). The environment variable
            ``COMPANION_DEVICE`` does the same without editing a notebook.

    Returns:
        The chosen ``torch.device``.

    Raises:
        RuntimeError: If the preferred device is not available on this machine.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    prefer = prefer or os.environ.get("COMPANION_DEVICE")
    if prefer:
        device = torch.device(prefer)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {prefer!r} was requested but CUDA is not available")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise RuntimeError(f"device {prefer!r} was requested but MPS is not available")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (all devices) and return a seeded generator.

    The returned generator is what you pass to ``DataLoader(generator=...)`` so that
    shuffling is reproducible independently of any other random calls.

    Args:
        seed: Any non-negative integer.

    Returns:
        A ``torch.Generator`` seeded with ``seed``.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def describe_device(device: torch.device) -> str:
    """One line naming the device, e.g. ``cuda:0 (NVIDIA H200)`` or ``cpu (2 threads)``.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    if device.type == "cpu":
        threads = torch.get_num_threads()
        return f"cpu ({threads} {'thread' if threads == 1 else 'threads'})"
    return str(device)


@dataclass(frozen=True)
class DevicePlan:
    """Where one rank computes, and which process-group backend its collectives use.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """

    device: torch.device
    backend: str  # "nccl" or "gloo"
    reason: str | None  # None when each rank got its own GPU (or MPS alone); else why the CPU


def plan_device(*, rank: int, local_rank: int, local_world_size: int, world_size: int,
                cuda_count: int, mps: bool, forced: str | None,
                ranks_per_host: int | None = None, in_group: bool = False) -> DevicePlan:
    """The device and backend of one rank, from what it knows about its host (a pure function).

    The rule: every rank on this host gets its own GPU (``cuda:<slot>`` and NCCL) when the host
    has at least as many GPUs as ranks; otherwise every rank runs on the CPU with gloo, and
    ``reason`` says why (NCCL refuses two ranks on one GPU; gloo runs no collectives on MPS
    tensors). A process alone (one rank on the host, world size 1) keeps ``get_device``'s
    choice: CUDA, then MPS, then the CPU — unless it joins a process group (``torchrun
    --nproc_per_node=1``), whose gloo collectives need CPU tensors. ``forced`` (``COMPANION_DEVICE``) ``"cpu"`` puts
    every rank on the CPU; ``"cuda"``/``"cuda:N"`` that cannot be honoured is an error.

    Args:
        rank, local_rank, local_world_size, world_size: What ``torchrun`` tells the rank.
        cuda_count: GPUs visible on this host. mps: Whether Apple MPS is available.
        forced: "cpu", "cuda", "cuda:N", "mps" or None.
        ranks_per_host: Ranks sharing this host when agents each start one worker
            (``COMPANION_RANKS_PER_HOST``); then the slot is ``rank % ranks_per_host``.
        in_group: Whether the rank joins a process group (``torchrun`` started it).

    Raises:
        RuntimeError: A forced CUDA device that this host cannot give every rank.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    ranks_here = ranks_per_host or local_world_size  # the ranks that share this host's GPUs
    slot = rank % ranks_here if ranks_per_host else local_rank  # this rank's GPU, if it gets one
    alone = world_size == 1 and ranks_here == 1  # no GPU to share
    kind = torch.device(forced).type if forced else None
    if in_group and mps and kind in (None, "mps"):
        alone = False  # gloo's collectives (DDP's first broadcast too) refuse MPS tensors
    if kind == "cuda":
        return DevicePlan(_forced_cuda(torch.device(forced), slot, ranks_here, cuda_count), "nccl",
                          None)
    if kind == "mps" and not mps:
        raise RuntimeError(f"device {forced!r} was requested but MPS is not available")
    if kind is None and cuda_count >= ranks_here:
        return DevicePlan(torch.device("cuda", slot), "nccl", None)
    if alone and mps and kind in (None, "mps"):
        return DevicePlan(torch.device("mps"), "gloo", None)
    if kind == "cpu":
        why, hint = f"COMPANION_DEVICE={forced}", ""
    elif mps:
        why, hint = "Apple MPS", " (gloo runs no collectives on MPS tensors)"
    elif cuda_count == 0:
        why, hint = "no GPU", ""
    else:
        why, hint = f"{cuda_count} GPU{'s' * (cuda_count > 1)}", " (NCCL needs one GPU per rank)"
    if alone:
        return DevicePlan(torch.device("cpu"), "gloo", f"1 process, {why} -> cpu")
    return DevicePlan(torch.device("cpu"), "gloo",
                      f"{ranks_here} rank{'s' * (ranks_here > 1)} on this host, {why} -> every rank on "
                      f"cpu with gloo{hint}")


def _forced_cuda(want: torch.device, slot: int, ranks_here: int, cuda_count: int) -> torch.device:
    """The GPU a forced ``cuda``/``cuda:N`` gives this rank, or a RuntimeError saying why not."""
    if cuda_count == 0:
        raise RuntimeError(f"device {str(want)!r} was requested but CUDA is not available")
    if want.index is not None and want.index >= cuda_count:
        raise RuntimeError(f"device {str(want)!r} was requested but this host has {cuda_count} "
                           f"GPU(s)")
    if want.index is not None and ranks_here > 1:
        raise RuntimeError(f"device {str(want)!r} would put all {ranks_here} ranks on this host "
                           "on one GPU, which NCCL refuses; set COMPANION_DEVICE=cuda or cpu")
    if cuda_count < ranks_here:
        raise RuntimeError(f"device 'cuda' was requested for {ranks_here} ranks on this host but "
                           f"it has {cuda_count} GPU(s), and NCCL needs one per rank; set "
                           "COMPANION_DEVICE=cpu, or unset it to fall back to the CPU")
    return want if want.index is not None else torch.device("cuda", slot)


def device_plan_from_env(environ: Mapping[str, str] | None = None, *,
                         prefer: str | None = None) -> DevicePlan:
    """``plan_device`` for this process: ranks from ``torchrun``'s variables, GPUs from torch.

    Reads RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE (a plain ``python`` run is rank 0 of
    1), ``COMPANION_DEVICE`` and ``COMPANION_RANKS_PER_HOST``; ``prefer`` (a script's
    ``device_type``) wins over ``COMPANION_DEVICE``.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    env = os.environ if environ is None else environ
    world_size = int(env.get("WORLD_SIZE", "1"))
    ranks_per_host = env.get(RANKS_PER_HOST_ENV)
    return plan_device(
        rank=int(env.get("RANK", "0")), local_rank=int(env.get("LOCAL_RANK", "0")),
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world_size))), world_size=world_size,
        cuda_count=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        mps=torch.backends.mps.is_available(), forced=prefer or env.get("COMPANION_DEVICE") or None,
        ranks_per_host=int(ranks_per_host) if ranks_per_host else None, in_group="RANK" in env)
