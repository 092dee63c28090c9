"""Samples/s of ``common.ddp.train``: 1 rank, 1 rank + 1 worker, 2 ranks (strong and weak).

    python -m common.ddp.bench                      # medians of 3 repeats, printed side by side
    python -m common.ddp.bench --repeats 5 --per-rank-batch 32
    python -m common.ddp.bench --data-pipeline decode   # Chapter 2's decoding: data-bound

Four runs, side by side, one thread per process:

- ``1 rank``: the baseline as most people measure it (one process, loading in-line);
- ``1 rank + 1 worker``: the same, with one DataLoader worker on the second core — the
  fair baseline on a 2-core machine, since 2 ranks use both cores too;
- ``2 ranks, strong``: the same global batch split over 2 ranks (half the batch each);
- ``2 ranks, weak``: every rank keeps the batch, so the global batch doubles.

The clock starts after two warm-up steps and stops before the first epoch ends: the step
count is capped below one epoch of the largest global batch, so no run crosses an epoch end
and none times a validation pass. Runs alternate (A, B, C, D, A, B, ...) so a change in the
machine's load hits all alike. On a GPU machine run it with ``--ranks 1``.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from common.cli import option, parse_config, positive
from common.ddp.launch import run_command, torchrun_command
from common.synthetic import ShapesData, ensure_data


@dataclass(frozen=True)
class Setup:
    """One column of the comparison: ranks, global batch, DataLoader workers per rank.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    name: str
    ranks: int
    global_batch: int
    workers: int


def setups(per_rank_batch: int, ranks: int = 2) -> list[Setup]:
    """The four runs compared (``ranks`` is the multi-rank count, 2 by default).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if ranks == 1:
        return [Setup("1 rank", 1, per_rank_batch, 0),
                Setup("1 rank + 1 worker", 1, per_rank_batch, 1)]
    return [Setup("1 rank", 1, per_rank_batch, 0),
            Setup("1 rank + 1 worker", 1, per_rank_batch, 1),
            Setup(f"{ranks} ranks, strong", ranks, per_rank_batch, 0),
            Setup(f"{ranks} ranks, weak", ranks, per_rank_batch * ranks, 0)]


def steps_within_epoch(num_train: int, runs: list[Setup], steps: int) -> int:
    """``steps``, capped so every run stops before its first epoch ends (no validation).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    per_epoch = min(num_train // s.global_batch for s in runs)
    if per_epoch < 4:
        raise ValueError(f"{num_train} training images give only {per_epoch} steps per epoch "
                         "at the largest global batch; use a smaller --per-rank-batch")
    return min(steps, per_epoch - 1)


def measure(setup: Setup, *, steps: int, data: str, pipeline: str = "cache") -> dict:
    """One ``torchrun`` training run; returns its ``done`` record (samples_per_s, ...).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "log.jsonl"
        args = ["--batch-size", str(setup.global_batch), "--max-steps", str(steps),
                "--threads", "1", "--num-workers", str(setup.workers), "--log-file", str(log),
                "--num-epochs", "1", "--data-pipeline", pipeline, "--no-augment"] + \
            (["--data", data] if data else [])
        run_command(torchrun_command("common.ddp.train", args, nproc_per_node=setup.ranks),
                    timeout=600, threads=1)
        records = [json.loads(line) for line in log.read_text().splitlines()]
    if any(r["event"] == "epoch" for r in records):
        raise RuntimeError(f"{setup.name}: the run finished an epoch inside the timed steps")
    return next(r for r in records if r["event"] == "done")


def benchmark(runs: list[Setup], *, repeats: int, steps: int, data: str = "",
              pipeline: str = "cache") -> dict[str, list[dict]]:
    """``repeats`` alternating runs of every setup.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    results: dict[str, list[dict]] = {s.name: [] for s in runs}
    for repeat in range(repeats):
        for setup in runs:
            results[setup.name].append(measure(setup, steps=steps, data=data, pipeline=pipeline))
            print(f"repeat {repeat + 1}/{repeats}, {setup.name}: "
                  f"{results[setup.name][-1]['samples_per_s']:.1f} samples/s", flush=True)
    return results


def summarize(runs: list[Setup], results: dict[str, list[dict]]) -> pd.DataFrame:
    """Median samples/s of every setup, and its ratio to both single-rank baselines.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    medians = {name: statistics.median(r["samples_per_s"] for r in rs)
               for name, rs in results.items()}
    rows = [{"setup": s.name, "ranks": s.ranks, "global_batch": s.global_batch,
             "workers_per_rank": s.workers, "samples_per_s": medians[s.name],
             "vs_1_rank": medians[s.name] / medians[runs[0].name],
             "vs_1_rank_1_worker": medians[s.name] / medians[runs[1].name],
             "data_wait_fraction": statistics.median(r["data_wait_fraction"]
                                                     for r in results[s.name])}
            for s in runs]
    return pd.DataFrame(rows)


@dataclass
class DDPBenchConfig:
    """The command line of ``python -m common.ddp.bench``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    ranks: int = option(2, "ranks of the multi-rank runs (1: only the single-rank baselines)")
    repeats: int = option(3, "alternating repeats of each (the median is reported)")
    steps: int = option(25, "optimizer steps per run (capped to stay within one epoch)")
    per_rank_batch: int = option(32, "batch of one rank (strong scaling splits it over the ranks)")
    data: str = option("", "dataset folder (default: data/shapes)")
    data_pipeline: str = option("cache", "cache: Chapter 3's uint8 cache (the data wait Chapter 4 "
                                "removes); decode: every JPEG decoded per sample",
                                choices=("cache", "decode"))


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.ddp.bench``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    args = parse_config(DDPBenchConfig, argv, description=__doc__.splitlines()[0],
                        validate=lambda c: positive(c, "ranks", "repeats", "steps",
                                                    "per_rank_batch"))
    data = ShapesData(Path(args.data)) if args.data else ensure_data(verbose=False)
    num_train = len(pd.read_csv(data.labels_csv("train")))
    runs = setups(args.per_rank_batch, args.ranks)
    steps = steps_within_epoch(num_train, runs, args.steps)
    print(f"{num_train} training images, {args.data_pipeline} pipeline (no augmentation): {steps} "
          "steps per run (2 warm-up), within one epoch")
    results = benchmark(runs, repeats=args.repeats, steps=steps, data=args.data,
                        pipeline=args.data_pipeline)
    print(summarize(runs, results).to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
