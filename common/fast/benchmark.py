"""Images/s of the guide's pipeline, the faster formulations, and the in-memory limit.

Run it::

    python -m common.fast.benchmark --out build/bench            # about a minute on 2 cores
    python -m common.fast.benchmark --out build/bench --quick    # a few seconds, tiny data

In one run, on the same image files, it measures (a) the guide's eval pipeline exactly as
written (``CustomImageDataset`` + PIL + ``Resize(256)``, ``CenterCrop(224)``, ``ToTensor``,
``Normalize``, per sample), (b) each faster formulation of ``common.fast.pipeline`` /
``common.fast.cache`` at several ``num_workers``, and (c) the limit: normalizing already-decoded
uint8 batches of the same shape straight from memory. Every variant ends in the same
normalized float32 batch. Configurations are timed round-robin (so a busy moment on a
shared machine hits all of them alike) and the median of the repeats is reported.
Writes ``benchmark.csv`` (``pipeline,num_workers,images_per_s,speedup_vs_guide``),
``benchmark.png`` and ``benchmark.json`` (config, machine, every repeat) to ``--out``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import torch
from matplotlib.figure import Figure
from torch.utils.data import DataLoader, Subset
from tqdm.auto import tqdm

from common.cli import option, parse_config, positive
from common.data import CustomImageDataset
from common.fast.cache import CacheConfig, CachedImageDataset, ensure_cache
from common.fast.pipeline import (
    BatchNormalize,
    NormalizedLoader,
    Uint8EvalDataset,
    make_fast_loader,
)
from common.synthetic import ShapesData, SyntheticConfig, ensure_data
from common.transforms import ClassicEvalPreset

GUIDE = "guide"
LIMIT = "memory_limit"
COLUMNS = ["pipeline", "num_workers", "images_per_s", "speedup_vs_guide"]
#: Tiny data for --quick: generated next to the results, in well under a second.
QUICK_DATA = SyntheticConfig(seed=3, num_train=32, num_val=8, min_size=48, max_size=96)


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
    formulations: tuple[str, ...] = option(("pil_draft_uint8", "torchvision_uint8", "cache_batched"),
                                           "the faster formulations to compare", nargs="+")
    threads: int = option(1, "intra-op threads of the main process, as in each DataLoader worker")
    quick: bool = option(False, "tiny data, a few seconds (given flags still win)")
    progress: bool = option(True, "show progress bars")

    @classmethod
    def quick_config(cls, **overrides) -> BenchConfig:
        return cls(**{**QUICK, "quick": True, **overrides})


#: What ``--quick`` changes (flags given on the command line still win).
QUICK = {"num_images": 32, "batch_size": 8, "repeats": 2, "num_workers": (0, 1), "min_seconds": 0.02}


@dataclass
class Result:
    pipeline: str
    num_workers: int
    repeats: list[float] = field(default_factory=list)  # images/s of each repeat


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
    if config.quick:
        return ensure_data(config.out / "data" / "shapes", QUICK_DATA, verbose=False)
    return ensure_data(verbose=False)


def build_pipelines(config: BenchConfig, data: ShapesData) -> dict[tuple[str, int], Iterable]:
    """Every (pipeline, num_workers) to time, each an iterable of normalized float batches.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    csv, images_dir = data.labels_csv("train"), data.images_dir("train")
    guide = CustomImageDataset(csv, images_dir, ClassicEvalPreset(
        resize_size=config.resize_size, crop_size=config.crop_size))
    indices = list(range(min(config.num_images, len(guide))))
    cache = ensure_cache(guide, config.out / "cache", CacheConfig(config.resize_size,
                                                                 config.crop_size),
                         indices=indices, num_workers=max(config.num_workers), verbose=False)
    datasets = {
        GUIDE: Subset(guide, indices),
        "pil_draft_uint8": Subset(Uint8EvalDataset(csv, images_dir, decoder="pil_draft",
                                                   resize_size=config.resize_size,
                                                   crop_size=config.crop_size), indices),
        "torchvision_uint8": Subset(Uint8EvalDataset(csv, images_dir, decoder="torchvision",
                                                     resize_size=config.resize_size,
                                                     crop_size=config.crop_size), indices),
        "cache_batched": CachedImageDataset(cache.root, check=False),
    }
    normalize = BatchNormalize()
    pipelines: dict[tuple[str, int], Iterable] = {}
    for name in (GUIDE, *config.formulations):
        for workers in config.num_workers:
            if name == GUIDE:
                pipelines[name, workers] = DataLoader(
                    datasets[name], batch_size=config.batch_size, num_workers=workers,
                    persistent_workers=workers > 0)
            else:
                loader = make_fast_loader(datasets[name], batch_size=config.batch_size,
                                          num_workers=workers)
                pipelines[name, workers] = NormalizedLoader(loader, normalize=normalize)
    in_memory = torch.from_numpy(cache.images.copy())  # a plain in-RAM array, not the memmap
    pipelines[LIMIT, 0] = NormalizedLoader(
        MemoryBatches(in_memory, torch.from_numpy(cache.labels), batch_size=config.batch_size),
        normalize=normalize)
    return pipelines


def time_epochs(loader: Iterable, num_images: int, *, min_seconds: float) -> float:
    """Images/s of whole epochs over ``loader``, run until ``min_seconds`` have passed.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    epochs, start = 0, time.perf_counter()
    while True:
        for images, _ in loader:
            if images.dtype != torch.float32:
                raise TypeError(f"expected normalized float32 batches, got {images.dtype}")
        epochs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return epochs * num_images / elapsed


def measure(config: BenchConfig, pipelines: dict[tuple[str, int], Iterable],
            num_images: int) -> list[Result]:
    """One warm-up round, then ``config.repeats`` timed rounds over all pipelines in turn.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    results = {key: Result(*key) for key in pipelines}
    rounds = tqdm(range(config.repeats + 1), desc="rounds", disable=not config.progress)
    for round_number in rounds:
        for key, loader in pipelines.items():
            speed = time_epochs(loader, num_images, min_seconds=config.min_seconds)
            if round_number > 0:  # round 0 starts workers and warms the page cache
                results[key].repeats.append(speed)
    return list(results.values())


def summarize(results: Sequence[Result]) -> pd.DataFrame:
    """The table: median images/s and the speedup over the guide at ``num_workers=0``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    frame = pd.DataFrame([{"pipeline": r.pipeline, "num_workers": r.num_workers,
                           "images_per_s": statistics.median(r.repeats)} for r in results])
    guide = frame.query("pipeline == @GUIDE and num_workers == 0")["images_per_s"]
    if len(guide) != 1:
        raise ValueError("the results need exactly one guide row with num_workers=0")
    frame["speedup_vs_guide"] = frame["images_per_s"] / guide.iloc[0]
    return frame[COLUMNS]


def verdict(table: pd.DataFrame) -> dict[str, float | str | bool]:
    """The best formulation and how it compares with the targets (10x guide, 50% of limit).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    candidates = table[~table["pipeline"].isin([GUIDE, LIMIT])]
    best = candidates.loc[candidates["images_per_s"].idxmax()]
    limit = table.loc[table["pipeline"] == LIMIT, "images_per_s"].iloc[0]
    share = best["images_per_s"] / limit
    return {"best": f"{best['pipeline']} (num_workers={best['num_workers']})",
            "speedup_vs_guide": float(best["speedup_vs_guide"]), "share_of_limit": float(share),
            "meets_targets": bool(best["speedup_vs_guide"] >= 10 and share >= 0.5)}


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
    """Measure, then write ``benchmark.csv``, ``benchmark.png``, ``benchmark.json``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    config.out.mkdir(parents=True, exist_ok=True)
    data = _data(config)
    pipelines = build_pipelines(config, data)
    num_images = len(pipelines[GUIDE, config.num_workers[0]].dataset)
    # One intra-op thread, as DataLoader gives each worker: with more, torch's thread pool
    # competes with the workers (and, on a shared machine, with everyone) and times scatter.
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        results = measure(config, pipelines, num_images)
    finally:
        torch.set_num_threads(threads)
    table = summarize(results)
    table.to_csv(config.out / "benchmark.csv", index=False, float_format="%.2f")
    plot(table, config.out / "benchmark.png")
    details = {"config": {**asdict(config), "out": str(config.out),
                          "data_root": str(data.root)},
               "num_images": num_images, "verdict": verdict(table),
               "machine": {"cpus": os.cpu_count(),
                           "platform": platform.platform(), "torch": torch.__version__},
               "repeats": [asdict(r) for r in results]}
    (config.out / "benchmark.json").write_text(json.dumps(details, indent=1))
    return table


def main(argv: list[str] | None = None) -> int:
    config = parse_config(BenchConfig, argv, description=__doc__.splitlines()[0],
                          presets={"quick": QUICK},
                          validate=lambda c: positive(c, "num_images", "batch_size", "repeats"))
    table = run_benchmark(config)
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    result = verdict(table)
    print(f"best: {result['best']}: {result['speedup_vs_guide']:.1f}x the guide, "
          f"{result['share_of_limit']:.0%} of the in-memory limit "
          f"(targets >= 10x and >= 50%: {'met' if result['meets_targets'] else 'NOT met'})")
    print(f"wrote {config.out / 'benchmark.csv'}, {config.out / 'benchmark.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
