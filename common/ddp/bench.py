"""Samples/s of ``common.ddp.train`` on 1 rank vs 2 ranks, one thread per rank.

    python -m common.ddp.bench                      # medians of 3 repeats, printed side by side
    python -m common.ddp.bench --repeats 5 --steps 30 --per-rank-batch 32

Weak scaling: every rank keeps the same batch (the global batch grows with the ranks), the
usual way to use more GPUs. The time counts whole training steps, data loading included,
after two warm-up steps. Runs alternate (1, 2, 1, 2, ...) so that a change in the machine's
load hits both sides alike. On a GPU machine run it with ``--ranks 1`` for single-GPU
samples/s and the fraction of time spent waiting for data.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common.cli import option, parse_config, positive
from common.ddp.launch import run_command, torchrun_command


def measure(ranks: int, *, steps: int, per_rank_batch: int, data: str, workers: int) -> dict:
    """One ``torchrun`` training run; returns its ``done`` record (samples_per_s, ...).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "log.jsonl"
        args = ["--batch-size", str(per_rank_batch * ranks), "--max-steps", str(steps),
                "--threads", "1", "--num-workers", str(workers), "--log-file", str(log),
                "--num-epochs", "100"] + (["--data", data] if data else [])
        run_command(torchrun_command("common.ddp.train", args, nproc_per_node=ranks),
                    timeout=600, threads=1)
        records = [json.loads(line) for line in log.read_text().splitlines()]
    return next(r for r in records if r["event"] == "done")


def benchmark(ranks: list[int], *, repeats: int, steps: int, per_rank_batch: int,
              data: str = "", workers: int = 0) -> dict[int, list[dict]]:
    """``repeats`` alternating runs per rank count.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    results: dict[int, list[dict]] = {n: [] for n in ranks}
    for repeat in range(repeats):
        for n in ranks:
            results[n].append(measure(n, steps=steps, per_rank_batch=per_rank_batch,
                                      data=data, workers=workers))
            print(f"repeat {repeat + 1}/{repeats}, {n} rank(s): "
                  f"{results[n][-1]['samples_per_s']:.1f} samples/s", flush=True)
    return results


def summarize(results: dict[int, list[dict]]) -> str:
    """A table of median samples/s per rank count, with the scaling ratio to 1 rank.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    medians = {n: statistics.median(r["samples_per_s"] for r in runs) for n, runs in results.items()}
    waits = {n: statistics.median(r["data_wait_fraction"] for r in runs) for n, runs in results.items()}
    base = medians[min(medians)]
    lines = ["ranks  median samples/s  scaling vs 1 rank  efficiency  data-wait fraction"]
    for n in sorted(medians):
        ratio = medians[n] / base
        lines.append(f"{n:>5}  {medians[n]:>16.1f}  {ratio:>16.2f}x  {ratio / n:>10.0%}"
                     f"  {waits[n]:>18.2f}")
    return "\n".join(lines)


@dataclass
class DDPBenchConfig:
    """The command line of ``python -m common.ddp.bench``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    ranks: tuple[int, ...] = option((1, 2), "numbers of ranks to compare", nargs="+")
    repeats: int = option(3, "alternating repeats of each (the median is reported)")
    steps: int = option(25, "optimizer steps per run")
    per_rank_batch: int = option(32, "batch per rank (weak scaling)")
    num_workers: int = option(0, "DataLoader workers per rank")
    data: str = option("", "dataset folder (default: data/shapes)")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.ddp.bench``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    args = parse_config(DDPBenchConfig, argv, description=__doc__.splitlines()[0],
                        validate=lambda c: positive(c, "repeats", "steps", "per_rank_batch"))
    results = benchmark(args.ranks, repeats=args.repeats, steps=args.steps,
                        per_rank_batch=args.per_rank_batch, data=args.data,
                        workers=args.num_workers)
    print(summarize(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
