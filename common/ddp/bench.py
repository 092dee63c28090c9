"""Samples/s of ``common.ddp.train``: 1 rank, 1 rank + 1 worker, 2 ranks (strong and weak).

    python -m common.ddp.bench                      # medians of 3 repeats, printed side by side
    python -m common.ddp.bench --repeats 5 --per-rank-batch 32
    python -m common.ddp.bench --data-pipeline decode   # Chapter 2's decoding: data-bound

Four runs, side by side, one thread per process in every run (``THREADS_PER_PROCESS``:
``--threads`` and ``OMP_NUM_THREADS``), so 2 ranks get 2 cores' worth of threads and 1 rank
one core's — the comparison a 2-core machine allows:

- ``1 rank``: the baseline as most people measure it (one process, loading in-line);
- ``1 rank + 1 worker``: the same, with one DataLoader worker on the second core — the
  fair baseline on a 2-core machine, since 2 ranks use both cores too;
- ``2 ranks, strong``: the same global batch split over 2 ranks (half the batch each);
- ``2 ranks, weak``: every rank keeps the batch, so the global batch doubles.

The clock starts after two warm-up steps and stops before the first epoch ends: the step
count is capped below one epoch of the largest global batch, so no run crosses an epoch end
and none times a validation pass. Runs alternate (A, B, C, D, A, B, ...) so a change in the
machine's load hits all alike. On a GPU machine run it with ``--ranks 1``.

``--in-process`` runs the single-rank setups in this process instead of under ``torchrun``:
``common.ddp.trainer.run_training`` (what ``common.ddp.train`` runs) in a gloo group of one,
with the environment torchrun would give it (``world_of_one``) and the same thread count —
the same program, without the launcher's start-up, which is how the notebook affords
repeats. The process's threads are restored.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

import pandas as pd
import torch

from common.cli import at_least, fail, holds, option, parse_dataclass_args, positive
from common.ddp.config import parse_config
from common.ddp.launch import free_port, rank_error, run_command, torchrun_command
from common.ddp.run_log import Timing
from common.ddp.trainer import run_training
from common.synthetic import MAKE_DATA, ShapesData, ensure_data

#: Torch threads (and OMP_NUM_THREADS) of every process of every run, the single rank included.
THREADS_PER_PROCESS = 1
#: SmallCNN's width in every run: at 32 channels a step computes about four times what it does at the
#: trainer's default 16, for twice the activations and the gradients to all-reduce, so the two ranks'
#: arithmetic (not the shared memory bandwidth and the all-reduce) is what the comparison measures.
WIDTH = 32


@dataclass(frozen=True)
class Setup:
    """One column of the comparison: ranks, global batch, DataLoader workers per rank.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    name: str
    ranks: int
    global_batch: int
    workers: int

    @property
    def per_rank_batch(self) -> int:
        return self.global_batch // self.ranks

    def scaling(self, baseline: Setup) -> str:
        """``weak`` (same batch per rank as ``baseline``), ``strong`` (same global batch) or ``baseline``."""
        if self.ranks == baseline.ranks:
            return "baseline"
        return "weak" if self.per_rank_batch == baseline.per_rank_batch else "strong"


def setups(per_rank_batch: int, ranks: int = 2, *, worker_baseline: bool = True) -> list[Setup]:
    """The runs compared (``ranks`` is the multi-rank count, 2 by default).

    ``worker_baseline=False`` leaves out ``1 rank + 1 worker`` (the notebook's three runs).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    baselines = [Setup("1 rank", 1, per_rank_batch, 0)]
    if worker_baseline:
        baselines.append(Setup("1 rank + 1 worker", 1, per_rank_batch, 1))
    if ranks == 1:
        return baselines
    return baselines + [Setup(f"{ranks} ranks, strong", ranks, per_rank_batch, 0),
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


def train_args(setup: Setup, *, steps: int, data: str, pipeline: str, log: Path,
               width: int = WIDTH) -> list[str]:
    """The ``common.ddp.train`` flags of one run: every run the same but for batch and workers.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return ["--batch-size", str(setup.global_batch), "--max-steps", str(steps),
            "--threads", str(THREADS_PER_PROCESS), "--num-workers", str(setup.workers),
            "--log-file", str(log), "--num-epochs", "1", "--data-pipeline", pipeline,
            "--no-augment", "--width", str(width)] + (["--data", data] if data else [])


def world_of_one() -> dict[str, str]:
    """The variables ``torchrun --nproc-per-node=1`` gives its worker (a free port to meet on).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}


def _train_here(args: list[str]) -> None:
    """The trainer in this process, as torchrun's single worker of ``common.ddp.train`` runs it.

    With ``world_of_one`` in the environment it joins a gloo group of one and trains the
    DDP-wrapped model: each step does what a rank of a multi-rank run does, all-reduce
    included (over one rank), so only the number of processes differs. The group is
    destroyed when the run returns, the environment and thread count are restored. Like any
    run it seeds this process's generators (``--seed``); the caller reseeds if it cares.
    """
    threads, said = torch.get_num_threads(), io.StringIO()
    try:  # what the run prints (its log lines, rank 0's device note) is kept for an error only
        with patch.dict(os.environ, world_of_one()), redirect_stdout(said), redirect_stderr(said):
            status = run_training(parse_config(args))
    finally:
        torch.set_num_threads(threads)
    if status != 0:
        raise RuntimeError(f"common.ddp.train {' '.join(args)} exited with {status}:\n"
                           f"{said.getvalue()[-2000:]}")


def measure(setup: Setup, *, steps: int, data: str, pipeline: str = "cache",
            in_process: bool = False, width: int = WIDTH) -> dict:
    """One training run; returns its ``done`` record (samples_per_s, ...).

    Under ``torchrun``, or, with ``in_process`` and a single rank, in this process.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "log.jsonl"
        args = train_args(setup, steps=steps, data=data, pipeline=pipeline, log=log, width=width)
        if in_process and setup.ranks == 1:
            _train_here(args)
        else:
            run_command(torchrun_command("common.ddp.train", args, nproc_per_node=setup.ranks),
                        timeout=600, threads=THREADS_PER_PROCESS)
        records = [json.loads(line) for line in log.read_text().splitlines()]
    if any(r["event"] == "epoch" for r in records):
        raise RuntimeError(f"{setup.name}: the run finished an epoch inside the timed steps")
    return next(r for r in records if r["event"] == "done")


def benchmark(runs: list[Setup], *, repeats: int, steps: int, data: str = "",
              pipeline: str = "cache", in_process: bool = False, width: int = WIDTH,
              verbose: bool = True) -> dict[str, list[dict]]:
    """``repeats`` alternating runs of every setup.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    results: dict[str, list[dict]] = {s.name: [] for s in runs}
    for repeat in range(repeats):
        for setup in runs:
            results[setup.name].append(measure(setup, steps=steps, data=data, pipeline=pipeline,
                                               in_process=in_process, width=width))
            if verbose:
                print(f"repeat {repeat + 1}/{repeats}, {setup.name}: "
                      f"{results[setup.name][-1]['samples_per_s']:.1f} samples/s", flush=True)
    return results


def summarize(runs: list[Setup], results: dict[str, list[dict]]) -> pd.DataFrame:
    """Median samples/s of every setup, and its ratio to the single-rank baseline(s).

    ``runs[0]`` is the baseline (``vs_1_rank``, and the reference of ``scaling``); a
    single-rank setup with a loader worker, if present, gets its own ratio column.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    medians = {name: statistics.median(r["samples_per_s"] for r in rs)
               for name, rs in results.items()}
    worker = next((s for s in runs if s.ranks == 1 and s.workers > 0), None)
    rows = [{"setup": s.name, "ranks": s.ranks, "scaling": s.scaling(runs[0]),
             "per_rank_batch": s.per_rank_batch, "global_batch": s.global_batch,
             "workers_per_rank": s.workers, "threads_per_process": THREADS_PER_PROCESS,
             "repeats": len(results[s.name]), "samples_per_s": medians[s.name],
             "vs_1_rank": medians[s.name] / medians[runs[0].name],
             **({"vs_1_rank_1_worker": medians[s.name] / medians[worker.name]} if worker else {}),
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
    in_process: bool = option(False, "run the single-rank setups in this process, not under torchrun")
    width: int = option(WIDTH, "SmallCNN width of every run (channels of its first block)")


def check_config(config: DDPBenchConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field (empty when it is valid).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    warmup = Timing.warmup
    return {**positive(config, "ranks", "repeats", "per_rank_batch", "width"),
            **at_least(config, warmup + 1, "steps", why=f"the first {warmup} are not timed"),
            **holds(config, "data", "train/labels.csv", hint=MAKE_DATA)}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.ddp.bench``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    args = parse_dataclass_args(DDPBenchConfig, argv, description=__doc__.splitlines()[0],
                                validate=check_config)
    data = ShapesData(Path(args.data)) if args.data else ensure_data(verbose=False)
    num_train = len(pd.read_csv(data.labels_csv("train")))
    runs = setups(args.per_rank_batch, args.ranks)
    try:
        steps = steps_within_epoch(num_train, runs, args.steps)
    except ValueError as error:  # too few images for the batch: names --per-rank-batch
        return fail(f"--data {data.root}: {error}", prog="common.ddp.bench")
    print(f"{num_train} training images, {args.data_pipeline} pipeline (no augmentation): {steps} "
          "steps per run (2 warm-up), within one epoch")
    try:
        results = benchmark(runs, repeats=args.repeats, steps=steps, data=args.data,
                            pipeline=args.data_pipeline, in_process=args.in_process,
                            width=args.width)
    except RuntimeError as error:  # a run that failed: its rank's one-line error
        return fail(rank_error(str(error)), prog="common.ddp.bench")
    print(summarize(runs, results).to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
