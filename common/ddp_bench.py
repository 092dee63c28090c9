"""Samples/s of ``common.ddp_train`` on 1 rank vs 2 ranks, one thread per rank.

    python -m common.ddp_bench                      # medians of 3 repeats, printed side by side
    python -m common.ddp_bench --repeats 5 --steps 30 --per-rank-batch 32

Weak scaling: every rank keeps the same batch (the global batch grows with the ranks), the
usual way to use more GPUs. The time counts whole training steps, data loading included,
after two warm-up steps. Runs alternate (1, 2, 1, 2, ...) so that a change in the machine's
load hits both sides alike. On a GPU machine run it with ``--ranks 1`` for single-GPU
samples/s and the fraction of time spent waiting for data.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from common.distributed import run_command, torchrun_command


def measure(ranks: int, *, steps: int, per_rank_batch: int, data: str, workers: int) -> dict:
    """One ``torchrun`` training run; returns its ``done`` record (samples_per_s, ...).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "log.jsonl"
        args = ["--batch-size", str(per_rank_batch * ranks), "--max-steps", str(steps),
                "--threads", "1", "--num-workers", str(workers), "--log-file", str(log),
                "--epochs", "100"] + (["--data", data] if data else [])
        run_command(torchrun_command("common.ddp_train", args, nproc_per_node=ranks),
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.ddp_bench``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=25, help="optimizer steps per run")
    parser.add_argument("--per-rank-batch", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--data", default="", help="dataset folder (default: data/shapes)")
    args = parser.parse_args(argv)
    results = benchmark(args.ranks, repeats=args.repeats, steps=args.steps,
                        per_rank_batch=args.per_rank_batch, data=args.data,
                        workers=args.num_workers)
    print(summarize(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
