"""What the pipelines cost: the fastest way to normalize (the limit), and when the cache pays.

``formulations`` times the ways to turn in-memory uint8 batches into the normalized float
batch, side by side; the fastest is the benchmark's ``memory_limit``. ``cache_payoff`` and
``epochs_curve`` count the cache's build and open time against the pipelines that decode
every epoch. ``common.fast.benchmark`` uses both; chapter 3 plots them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import pandas as pd
import torch

from common.fast.pipeline import BatchNormalize, normalize_into

GUIDE = "guide"
LIMIT = "memory_limit"
#: Formulations that read the decode-once cache (the rest decode every epoch).
CACHED = ("cache_batched", "cache_fused")


def cache_payoff(table: pd.DataFrame, cache_info: dict[str, float],
                 num_images: int) -> dict[str, float | str]:
    """When the cache pays for itself against the best pipeline that decodes every epoch.

    After ``e`` epochs the cache has cost ``build + open + e * N / cached`` seconds, the
    other ``e * N / best``; ``break_even_epochs`` is the ``e`` where they meet.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    cached = table[table["pipeline"].isin(CACHED)]
    decoding = table[~table["pipeline"].isin((*CACHED, LIMIT))]
    fast, slow = (cached.loc[cached["images_per_s"].idxmax()],
                  decoding.loc[decoding["images_per_s"].idxmax()])
    saved = num_images / slow["images_per_s"] - num_images / fast["images_per_s"]
    cost = cache_info["build_s"] + cache_info["open_s"]
    return {**cache_info, "num_images": num_images,
            "build_ms_per_image": 1e3 * cache_info["build_s"] / num_images,
            "best_cached": f"{fast['pipeline']} (num_workers={fast['num_workers']})",
            "best_decoding": f"{slow['pipeline']} (num_workers={slow['num_workers']})",
            "break_even_epochs": cost / saved if saved > 0 else float("inf")}


def epochs_curve(table: pd.DataFrame, payoff: dict, epochs: Sequence[float]) -> pd.DataFrame:
    """Images/s averaged over the first ``e`` epochs, the cache's build and open included.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    best = {name: table.loc[table["pipeline"].isin(group), "images_per_s"].max()
            for name, group in (("guide", [GUIDE]), ("best decoding", [p for p in table["pipeline"]
                                                                      if p not in (*CACHED, LIMIT)]),
                                ("cache", list(CACHED)))}
    n, cost = payoff["num_images"], payoff["build_s"] + payoff["open_s"]
    rows = [{"epochs": e, "guide": best["guide"], "best decoding": best["best decoding"],
             "cache (build included)": e * n / (cost + e * n / best["cache"])} for e in epochs]
    return pd.DataFrame(rows).set_index("epochs")


def agrees(out: torch.Tensor, expected: torch.Tensor) -> bool:
    """A formulation's batch is the normalized batch, to float32 rounding.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    return torch.allclose(out, expected, atol=1e-5)


def formulations(images: torch.Tensor, *, repeats: int = 7, batch_size: int = 32) -> pd.DataFrame:
    """Images/s of ways to turn in-memory uint8 batches into normalized float batches.

    The evidence for the limit's formulation: each candidate is first checked against the
    reference to 1e-5 on every batch (untimed: the check costs more than the work), then
    timed round-robin on the same batches, one thread.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    normalize = BatchNormalize()
    scale, shift = normalize.scale, normalize.shift
    ring = [torch.empty(batch_size, *images.shape[1:]) for _ in range(2)]
    candidates = {
        "fresh .float(), mul_, add_": lambda b, k: b.float().mul_(scale).add_(shift),
        "mul(out=buffer), add_": lambda b, k: torch.mul(b, scale, out=ring[k % 2][:len(b)])
        .add_(shift),
        "addcmul(out=buffer)": lambda b, k: torch.addcmul(shift, b, scale,
                                                         out=ring[k % 2][:len(b)]),
        "batch copy_, mul_, add_ (buffer)": lambda b, k: ring[k % 2][:len(b)].copy_(b)
        .mul_(scale).add_(shift),
        "per image copy_, mul_, add_ (buffer)": lambda b, k: normalize_into(
            b, ring[k % 2][:len(b)], scale, shift),
    }
    batches = [images[i:i + batch_size] for i in range(0, len(images), batch_size)]
    for name, fn in candidates.items():  # also the warm-up pass
        for k, batch in enumerate(batches):
            if not agrees(fn(batch, k), normalize(batch)):
                raise AssertionError(f"{name} does not give the normalized batch {k}")
    speeds: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            start = time.perf_counter()
            for k, batch in enumerate(batches):
                fn(batch, k)
            speeds[name].append(len(images) / (time.perf_counter() - start))
    return pd.DataFrame({"formulation": list(speeds),
                         "images_per_s": [statistics.median(v) for v in speeds.values()]}
                        ).sort_values("images_per_s", ascending=False, ignore_index=True)
