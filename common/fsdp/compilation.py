"""Where ``torch.compile`` pays on a CPU and where it does not, timed side by side with eager.

``pointwise_chain`` is the case Inductor is built for: six pointwise ops that eager PyTorch
runs as six passes over memory (each reading and writing the whole tensor) and Inductor fuses
into one loop. Chapter 6.3 calls ``torch.compile`` itself; these helpers only time what it
compiles: ``compare_ms`` gives the median time per call of several functions (eager, compiled)
in alternating rounds, and ``time_by_layer_type`` says where a model's eager forward pass
spends its time, which is what compilation can or cannot shorten.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable

import pandas as pd
import torch
from torch import nn


def cpp_compiler() -> str | None:
    """The C++ compiler Inductor calls for CPU kernels (``$CXX``, else ``g++``), or None if missing.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    default = "cl" if sys.platform == "win32" else "clang++" if sys.platform == "darwin" else "g++"
    return shutil.which(os.environ.get("CXX") or default)


def chain_inputs(batch: int = 32, channels: int = 64, size: int = 32, *,
                 seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A batch of activations and per-channel mean, 1/std, weight and bias for ``pointwise_chain``.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, channels, size, size, generator=generator)
    mean, weight, bias = (torch.randn(1, channels, 1, 1, generator=generator) for _ in range(3))
    inv_std = torch.rand(1, channels, 1, 1, generator=generator) + 0.5
    return x, mean, inv_std, weight, bias


def pointwise_chain(x: torch.Tensor, mean: torch.Tensor, inv_std: torch.Tensor,
                    weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Normalize per channel, scale and shift, SiLU, halve: six ops, each a pass over ``x`` in eager.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    y = (x - mean) * inv_std
    y = y * weight + bias
    return nn.functional.silu(y) * 0.5


def _seconds(fn: Callable, args: tuple) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def median_ms(fn: Callable, *args: torch.Tensor, repeats: int = 7) -> float:
    """Median milliseconds of ``fn(*args)`` without gradients, after one warm-up call.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    return compare_ms({"fn": fn}, *args, repeats=repeats)["fn"]


def compare_ms(fns: dict[str, Callable], *args: torch.Tensor, repeats: int = 7) -> dict[str, float]:
    """Median milliseconds per call of each function on the same ``args``, without gradients.

    One warm-up call each (a compiled function compiles there, if it has not yet), then
    ``repeats`` rounds that call every function once in turn, so that load on the machine
    hits all of them alike.

    Example::

        compare_ms({"eager": model, "compiled": torch.compile(model)}, images)

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    times: dict[str, list[float]] = {name: [] for name in fns}
    with torch.no_grad():
        for fn in fns.values():
            fn(*args)
        for _ in range(repeats):
            for name, fn in fns.items():
                times[name].append(_seconds(fn, args))
    return {name: 1e3 * statistics.median(seconds) for name, seconds in times.items()}


def time_by_layer_type(model: nn.Module, images: torch.Tensor, *, repeats: int = 3) -> pd.Series:
    """Share of an eager forward pass spent in each kind of leaf module (forward hooks).

    The shares are of the whole forward time, summed over ``repeats`` passes after one
    warm-up; ``other`` is what no leaf module accounts for (Python, the hooks themselves).

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    spent: dict[str, float] = {}
    started: dict[int, float] = {}

    def before(module: nn.Module, _inputs) -> None:
        started[id(module)] = time.perf_counter()

    def after(module: nn.Module, _inputs, _output) -> None:
        kind = type(module).__name__
        spent[kind] = spent.get(kind, 0.0) + time.perf_counter() - started.pop(id(module))

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [h for m in leaves for h in (m.register_forward_pre_hook(before),
                                            m.register_forward_hook(after))]
    try:
        with torch.no_grad():
            model(images)
            spent.clear()
            start = time.perf_counter()
            for _ in range(repeats):
                model(images)
            total = time.perf_counter() - start
    finally:
        for handle in handles:
            handle.remove()
    shares = pd.Series(spent) / total
    shares["other"] = max(0.0, 1.0 - shares.sum())
    return shares.sort_values(ascending=False).rename("share of eager forward time")
