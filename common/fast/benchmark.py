"""Images/s of the guide's pipeline, the faster formulations, and the in-memory limit.

Run it::

    python -m common.fast.benchmark --out build/bench            # about a minute on 2 cores
    python -m common.fast.benchmark --out build/bench --quick    # a few seconds, tiny data
    python -m common.fast.benchmark --out build/bench/15360 --size 15360 --max-images 640

In one run, on the same image files, it measures (a) the guide's eval pipeline exactly as
written (``CustomImageDataset`` + PIL + ``Resize(256)``, ``CenterCrop(224)``, ``ToTensor``,
``Normalize``, per sample), (b) each faster formulation of ``common.fast.pipeline`` /
``common.fast.cache`` at several ``num_workers``, and (c) the limit: normalizing already-decoded
uint8 batches of the same shape straight from memory, with the fastest formulation found
(``normalize_into``: image by image into a reused float batch; ``--formulations-only`` times
the alternatives side by side). Every variant ends in the same normalized float32 batch.
Configurations are timed round-robin (so a busy moment on a shared machine hits all of them
alike) and the median of the repeats is reported, with the peak PSS (main process plus
workers) seen at the end of a repeat. The cache's build time, open time and the epoch after
which it has paid for itself against the best non-cached pipeline are reported too.
Writes ``benchmark.csv`` (``pipeline,num_workers,images_per_s,speedup_vs_guide,peak_pss_mb``),
``cache.csv``, ``benchmark.png`` and ``benchmark.json`` (config, machine, every repeat) to
``--out``. ``--size N`` generates (once) and measures an N-image dataset; with
``--max-images`` each repeat reads only that many images, so large sizes stay quick.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch
from matplotlib.figure import Figure
from torch.utils.data import DataLoader, Subset

from common.cli import (
    fail,
    finite,
    holds,
    is_dir_or_absent,
    non_negative,
    option,
    parse_dataclass_args,
    positive,
)
from common.data import CustomImageDataset
from common.fast.cache import CacheConfig, CachedImageDataset, CacheError, ensure_cache
from common.fast.costs import GUIDE, LIMIT, cache_payoff, formulations
from common.fast.memory import MB
from common.fast.pipeline import (
    BatchNormalize,
    CacheLoader,
    NormalizedLoader,
    Uint8EvalDataset,
    make_fast_loader,
)
from common.fast.timing import QUICK_DATA, intra_op_threads, measure, summarize
from common.synthetic import MAKE_DATA, ShapesData, SyntheticConfig, ensure_data
from common.transforms import ClassicEvalPreset

LIMIT_IMAGES = 1024


#: What ``--formulations`` may name (each is built in ``build_pipelines``).
FORMULATIONS = ("pil_draft_uint8", "torchvision_uint8", "cache_batched", "cache_fused")


@dataclass
class BenchConfig:
    """What to measure. ``quick()`` gives the few-second variant the tests use.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    out: Path = option(Path("build/bench"), "output folder (CSV, PNG, JSON)")
    data_root: Path | None = option(None, "a generated shapes dataset (default: the repository's data)")
    num_images: int = option(640, "images per epoch")
    batch_size: int = option(32, "images per batch")
    repeats: int = option(5, "round-robin repeats of every pipeline (the median is reported)")
    num_workers: tuple[int, ...] = option((0, 1, 2), "DataLoader worker counts to measure", nargs="+")
    min_seconds: float = option(0.25, "a timed repeat runs whole epochs for at least this long")
    resize_size: int = option(256, "resize of the eval transform")
    crop_size: int = option(224, "centre crop of the eval transform")
    formulations: tuple[str, ...] = option(("pil_draft_uint8", "torchvision_uint8", "cache_batched",
                                            "cache_fused"),
                                           "the faster formulations to compare", nargs="+",
                                           choices=FORMULATIONS)
    size: int = option(0, "generate (once, under --out) and use a dataset of this many training "
                          "images (0: the repository's 960)")
    max_images: int = option(0, "images read per timed repeat (0: whole epochs)")
    buffers: int = option(2, "reused float batches of the normalizing step (0: a fresh one each)")
    threads: int = option(1, "intra-op threads of the main process, as in each DataLoader worker")
    formulations_only: bool = option(False, "only time the ways to normalize in-memory uint8 "
                                            "batches (the evidence for the limit) and exit")
    quick: bool = option(False, "tiny data, a few seconds (given flags still win)")
    progress: bool = option(True, "show progress bars")


#: What ``--quick`` changes (flags given on the command line still win).
QUICK = {"num_images": 32, "batch_size": 8, "repeats": 2, "num_workers": (0, 1), "min_seconds": 0.02}


class MemoryBatches:
    """The limit (c): uint8 batches already decoded and in memory, nothing else to do.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, *, batch_size: int) -> None:
        self.images, self.labels, self.batch_size = images, labels, batch_size

    def __len__(self) -> int:
        return -(-len(self.labels) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for start in range(0, len(self.labels), self.batch_size):
            stop = start + self.batch_size
            yield self.images[start:stop], self.labels[start:stop]


def _data(config: BenchConfig) -> ShapesData:
    if config.data_root is not None:
        return ShapesData(Path(config.data_root))
    if config.size:
        return ensure_data(config.out / "data" / f"shapes_{config.size}",
                           SyntheticConfig(num_train=config.size, num_val=8), verbose=False)
    if config.quick:
        return ensure_data(config.out / "data" / "shapes", QUICK_DATA, verbose=False)
    return ensure_data(verbose=False)


def open_timed(guide: CustomImageDataset, config: BenchConfig,
               indices: list[int]) -> tuple[CachedImageDataset, dict[str, float]]:
    """Build the cache if needed, then time opening the intact cache as a run would.

    Returns the dataset and ``{"build_s", "open_s", "cache_mb"}``: ``build_s`` is what the
    build took (recorded in the manifest, whenever it happened), ``open_s`` an
    ``ensure_cache`` on the intact cache plus ``CachedImageDataset(check=True)``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    cache_config = CacheConfig(config.resize_size, config.crop_size)
    root = config.out / "cache"
    ensure_cache(guide, root, cache_config, indices=indices, num_workers=max(config.num_workers),
                 verbose=False)
    start = time.perf_counter()
    cache = ensure_cache(guide, root, cache_config, indices=indices, verbose=False)
    dataset = CachedImageDataset(cache.root, check=True)
    open_s = time.perf_counter() - start
    return dataset, {"build_s": float(cache.manifest["build_seconds"]), "open_s": open_s,
                     "cache_mb": cache.images.nbytes / MB}


def build_pipelines(config: BenchConfig, data: ShapesData) -> tuple[dict[tuple[str, int], Iterable],
                                                                     dict[str, float]]:
    """Every (pipeline, num_workers) to time, each an iterable of normalized float batches.

    Also returns the cache's build and open times (see :func:`open_timed`).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    csv, images_dir = data.labels_csv("train"), data.images_dir("train")
    guide = CustomImageDataset(csv, images_dir, ClassicEvalPreset(
        resize_size=config.resize_size, crop_size=config.crop_size))
    indices = list(range(min(config.size or config.num_images, len(guide))))
    cached, cache_info = open_timed(guide, config, indices)
    geometry = {"resize_size": config.resize_size, "crop_size": config.crop_size}
    datasets = {
        GUIDE: Subset(guide, indices),
        "pil_draft_uint8": Subset(Uint8EvalDataset(csv, images_dir, decoder="pil_draft",
                                                   **geometry), indices),
        "torchvision_uint8": Subset(Uint8EvalDataset(csv, images_dir, decoder="torchvision",
                                                     **geometry), indices),
        "cache_batched": cached,
    }
    pipelines: dict[tuple[str, int], Iterable] = {}
    for name in (GUIDE, *config.formulations):
        for workers in config.num_workers:
            if name == GUIDE:
                pipelines[name, workers] = DataLoader(
                    datasets[name], batch_size=config.batch_size, num_workers=workers,
                    persistent_workers=workers > 0)
            elif name == "cache_fused":
                if workers == 0:  # in-process by design (see CacheLoader)
                    pipelines[name, 0] = CacheLoader(cached, batch_size=config.batch_size,
                                                     buffers=max(config.buffers, 1))
            else:
                loader = make_fast_loader(datasets[name], batch_size=config.batch_size,
                                          num_workers=workers)
                pipelines[name, workers] = NormalizedLoader(
                    loader, normalize=BatchNormalize(buffers=config.buffers))
    # A plain in-RAM array, not the memmap; at most LIMIT_IMAGES, since a throughput ceiling
    # needs no more (and 15,360 crops would be 2.3 GB).
    count = min(len(cached), LIMIT_IMAGES)
    in_memory = torch.from_numpy(cached.array()[:count].copy())
    pipelines[LIMIT, 0] = NormalizedLoader(
        MemoryBatches(in_memory, torch.from_numpy(cached.labels[:count].copy()),
                      batch_size=config.batch_size),
        normalize=BatchNormalize(buffers=max(config.buffers, 1)))
    return pipelines, cache_info


def verdict(table: pd.DataFrame) -> dict[str, float | str | bool]:
    """The best formulation and how it compares with the targets (10x guide, 70% of limit).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    candidates = table[~table["pipeline"].isin([GUIDE, LIMIT])]
    best = candidates.loc[candidates["images_per_s"].idxmax()]
    limit = table.loc[table["pipeline"] == LIMIT, "images_per_s"].iloc[0]
    share = best["images_per_s"] / limit
    return {"best": f"{best['pipeline']} (num_workers={best['num_workers']})",
            "speedup_vs_guide": float(best["speedup_vs_guide"]), "share_of_limit": float(share),
            "meets_targets": bool(best["speedup_vs_guide"] >= 10 and share >= 0.7)}


def plot(table: pd.DataFrame, path: Path | None = None) -> Figure:
    """A horizontal bar chart of images/s (log scale), labelled with the speedups.

    Uses ``matplotlib.figure.Figure`` directly (no pyplot), so it changes no backend and
    works in scripts and notebooks alike; saved to ``path`` when given.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    labels = [f"{p}  w={w}" for p, w in zip(table["pipeline"], table["num_workers"],
                                             strict=True)]
    colors = ["tab:gray" if p == GUIDE else "tab:green" if p == LIMIT else "tab:blue"
              for p in table["pipeline"]]
    figure = Figure(figsize=(8, 0.35 * len(table) + 1.2))
    axis = figure.add_subplot()
    axis.barh(labels, table["images_per_s"], color=colors)
    for y, (speed, ratio) in enumerate(zip(table["images_per_s"], table["speedup_vs_guide"],
                                           strict=True)):
        axis.text(speed, y, f" {speed:,.0f}/s  ({ratio:.1f}x)", va="center", fontsize=8)
    axis.set_xscale("log")
    axis.invert_yaxis()
    axis.set_xlabel("images/s (median of repeats, log scale)")
    axis.set_title("Eval pipeline throughput: guide (grey), faster (blue), limit (green)")
    figure.tight_layout()
    if path is not None:
        figure.savefig(path, dpi=110)
    return figure


def run_benchmark(config: BenchConfig) -> pd.DataFrame:
    """Measure, then write ``benchmark.csv``, ``cache.csv``, ``benchmark.png``, ``benchmark.json``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    config.out.mkdir(parents=True, exist_ok=True)
    data = _data(config)
    pipelines, cache_info = build_pipelines(config, data)
    num_images = len(pipelines[GUIDE, config.num_workers[0]].dataset)
    with intra_op_threads(config.threads):
        results = measure(config, pipelines, num_images)
    table = summarize(results)
    payoff = cache_payoff(table, cache_info, num_images)
    table.to_csv(config.out / "benchmark.csv", index=False, float_format="%.2f")
    pd.DataFrame([payoff]).to_csv(config.out / "cache.csv", index=False, float_format="%.3f")
    plot(table, config.out / "benchmark.png")
    details = {"config": {**asdict(config), "out": str(config.out),
                          "data_root": str(data.root)},
               "num_images": num_images, "verdict": verdict(table), "cache": payoff,
               "machine": {"cpus": os.cpu_count(),
                           "platform": platform.platform(), "torch": torch.__version__},
               "repeats": [asdict(r) for r in results]}
    (config.out / "benchmark.json").write_text(json.dumps(details, indent=1))
    return table


def check_config(config: BenchConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field (empty when it is valid).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    crop = ({"crop_size": f"must be at most --resize-size {config.resize_size}, got "
                          f"{config.crop_size}"} if config.crop_size > config.resize_size else {})
    return {**crop, **positive(config, "num_images", "batch_size", "repeats", "resize_size",
                               "crop_size", "threads"),
            **non_negative(config, "num_workers", "min_seconds", "size", "max_images", "buffers"),
            **finite(config, "min_seconds"), **is_dir_or_absent(config, "out"),
            **holds(config, "data_root", "train/labels.csv", hint=MAKE_DATA)}


def main(argv: list[str] | None = None) -> int:
    """``python -m common.fast.benchmark``; an unusable cache is one line, not a traceback."""
    config = parse_dataclass_args(BenchConfig, argv, description=__doc__.splitlines()[0],
                                  presets={"quick": QUICK}, validate=check_config)
    try:
        return _run(config)
    except CacheError as error:
        return fail(str(error), prog="common.fast.benchmark")


def _run(config: BenchConfig) -> int:
    if config.formulations_only:
        torch.set_num_threads(config.threads)
        images = torch.randint(0, 256, (config.num_images, 3, config.crop_size, config.crop_size),
                               dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
        print(formulations(images, repeats=config.repeats, batch_size=config.batch_size)
              .to_string(index=False, float_format=lambda v: f"{v:,.0f}"))
        return 0
    table = run_benchmark(config)
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    result = verdict(table)
    print(f"best: {result['best']}: {result['speedup_vs_guide']:.1f}x the guide, "
          f"{result['share_of_limit']:.0%} of the in-memory limit "
          f"(targets >= 10x and >= 70%: {'met' if result['meets_targets'] else 'NOT met'})")
    payoff = json.loads((config.out / "benchmark.json").read_text())["cache"]
    print(f"cache: built in {payoff['build_s']:.2f} s ({payoff['build_ms_per_image']:.2f} ms/image), "
          f"opened in {payoff['open_s']:.3f} s; pays off after {payoff['break_even_epochs']:.1f} "
          f"epochs against {payoff['best_decoding']}")
    print(f"wrote {config.out / 'benchmark.csv'}, {config.out / 'cache.csv'}, "
          f"{config.out / 'benchmark.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
