"""Round-robin timing of data pipelines: what the loader benchmarks of chapters 3 and 5 share.

``common.fast.benchmark`` (chapter 3's pipelines) and ``common.shards.bench`` (chapter 5's
shard reader) time their pipelines the same way: one warm-up round, then ``repeats`` rounds
over all pipelines in turn (so a busy moment on a shared machine hits all of them alike), the
main process on ``intra_op_threads`` threads, and a table of medians with the speedup over a
baseline. Both are entry points; this module is the library they import.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import pandas as pd
import torch
from tqdm.auto import tqdm

from common.fast.costs import GUIDE
from common.fast.memory import pipeline_pss_mb
from common.synthetic import SyntheticConfig

COLUMNS = ["pipeline", "num_workers", "images_per_s", "speedup_vs_guide", "peak_pss_mb"]
#: Tiny data for --quick: generated next to the results, in well under a second.
QUICK_DATA = SyntheticConfig(seed=3, num_train=32, num_val=8, min_size=48, max_size=96)


class TimingConfig(Protocol):
    """The fields of a benchmark's config that :func:`measure` reads.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    repeats: int
    min_seconds: float
    max_images: int
    progress: bool


@dataclass
class Result:
    """The timed repeats of one (pipeline, num_workers).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    pipeline: str
    num_workers: int
    repeats: list[float] = field(default_factory=list)  # images/s of each repeat
    pss_mb: list[float] = field(default_factory=list)  # main + workers, at each repeat's end


def time_epochs(loader: Iterable, num_images: int, *, min_seconds: float,
                max_images: int = 0) -> float:
    """Images/s of whole epochs over ``loader``, run until ``min_seconds`` have passed.

    With ``max_images`` each pass stops after that many images (a partial epoch).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    seen, start = 0, time.perf_counter()
    while True:
        in_pass = 0
        for images, _ in loader:
            if images.dtype != torch.float32:
                raise TypeError(f"expected normalized float32 batches, got {images.dtype}")
            in_pass += len(images)
            if max_images and in_pass >= max_images:
                break
        seen += in_pass
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return seen / elapsed


@contextmanager
def intra_op_threads(count: int):
    """torch's intra-op threads of this process set to ``count`` inside the block, restored after.

    Benchmarks time the main process on one thread, as DataLoader gives each worker: with more,
    its spinning OpenMP threads compete with the workers for the cores, unevenly across
    pipelines, and on a shared machine with everyone.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure(config: TimingConfig, pipelines: dict[tuple[str, int], Iterable],
            num_images: int) -> list[Result]:
    """One warm-up round, then ``config.repeats`` timed rounds over all pipelines in turn.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    results = {key: Result(*key) for key in pipelines}
    rounds = tqdm(range(config.repeats + 1), desc="rounds", disable=not config.progress)
    for round_number in rounds:
        for key, loader in pipelines.items():
            speed = time_epochs(loader, num_images, min_seconds=config.min_seconds,
                                max_images=config.max_images)
            if round_number > 0:  # round 0 starts workers and warms the page cache
                results[key].repeats.append(speed)
                results[key].pss_mb.append(pipeline_pss_mb(loader))
    return list(results.values())


def summarize(results: Sequence[Result], *, baseline: str = GUIDE) -> pd.DataFrame:
    """The table: median images/s and the speedup over ``baseline`` at ``num_workers=0``.

    The speedup column keeps the name ``speedup_vs_guide`` whatever the baseline.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    frame = pd.DataFrame([{"pipeline": r.pipeline, "num_workers": r.num_workers,
                           "images_per_s": statistics.median(r.repeats),
                           "peak_pss_mb": max(r.pss_mb, default=float("nan"))}
                          for r in results])
    guide = frame.query("pipeline == @baseline and num_workers == 0")["images_per_s"]
    if len(guide) != 1:
        raise ValueError(f"the results need exactly one {baseline} row with num_workers=0 "
                         "(the guide row)")
    frame["speedup_vs_guide"] = frame["images_per_s"] / guide.iloc[0]
    return frame[COLUMNS]
