"""Device choice and seeding: the two lines at the top of every notebook."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


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
        return f"cpu ({torch.get_num_threads()} threads)"
    return str(device)
