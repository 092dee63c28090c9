"""FSDP vs DDP on 2 CPU ranks, side by side in one run: samples/s and bytes per rank.

    python -m common.fsdp.bench            # make bench-fsdp; about a minute on 2 cores

Each strategy trains the same SmallCNN (GroupNorm) on the shapes data under
``torchrun --standalone --nproc_per_node=2``, one thread per rank, alternating ``--repeats``
times; the table shows medians and the FSDP/DDP ratios. Memory is the bytes of parameters,
gradients and optimizer state each rank holds in its local tensors (``local_bytes``).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

from common.cli import at_least, fail, option, parse_dataclass_args, positive
from common.ddp.config import MIN_IMAGE_SIZE
from common.ddp.launch import rank_error, run_command, torchrun_command
from common.ddp.run_log import Timing


@dataclass
class BenchConfig:
    """Settings of the benchmark (each a flag).

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """

    ranks: int = option(2, "processes per strategy")
    repeats: int = option(2, "runs per strategy, alternating")
    steps: int = option(12, "optimizer steps per run (the first 2 are not timed)")
    width: int = option(16, "SmallCNN width")
    batch_size: int = option(48, "global batch")
    image_size: int = option(32, "image side")


def run_strategy(strategy: str, config: BenchConfig) -> dict:
    """One torchrun of ``common.fsdp.train``; returns its ``done`` record.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    args = ["--strategy", strategy, "--max-steps", str(config.steps), "--num-epochs", "9",
            "--width", str(config.width), "--batch-size", str(config.batch_size),
            "--image-size", str(config.image_size), "--subset", str(config.batch_size * 4),
            "--no-augment", "--threads", "1"]
    done = run_command(torchrun_command("common.fsdp.train", args, nproc_per_node=config.ranks),
                       timeout=300)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return next(r for r in records if r["event"] == "done")


def compare(config: BenchConfig) -> dict[str, dict[str, float]]:
    """Median samples/s and rank-0 bytes of each strategy, plus the FSDP/DDP ratios.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    results: dict[str, list[dict]] = {"ddp": [], "fsdp": []}
    for _ in range(config.repeats):
        for strategy in results:
            results[strategy].append(run_strategy(strategy, config))
    table = {s: {"samples_per_s": statistics.median(r["samples_per_s"] for r in runs),
                 "bytes_per_rank": max(b["total"] for b in runs[0]["bytes_per_rank"])}
             for s, runs in results.items()}
    table["fsdp/ddp"] = {key: table["fsdp"][key] / table["ddp"][key] for key in table["ddp"]}
    return table


def check_config(config: BenchConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field (empty when it is valid).

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    problems = {**positive(config, "ranks", "repeats", "width", "batch_size"),
                **at_least(config, Timing.warmup + 1, "steps",
                           why=f"the first {Timing.warmup} are not timed"),
                **at_least(config, MIN_IMAGE_SIZE, "image_size",
                           why="SmallCNN halves it three times")}
    if "batch_size" not in problems and "ranks" not in problems \
            and config.batch_size % config.ranks:
        problems["batch_size"] = (f"the global batch {config.batch_size} must split evenly over "
                                  f"--ranks {config.ranks}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.fsdp.bench``.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    config = parse_dataclass_args(BenchConfig, argv,
                                  description="FSDP vs DDP samples/s and bytes per "
                                  "rank (python -m common.fsdp.bench)",
                                  validate=check_config)
    try:
        table = compare(config)
    except RuntimeError as error:  # a run refused its flags (a batch larger than the data)
        return fail(rank_error(str(error)), prog="common.fsdp.bench")
    print(f"{'':10} {'samples/s':>10} {'bytes/rank':>11}   ({config.ranks} CPU ranks, gloo, "
          f"median of {config.repeats})")
    for name, row in table.items():
        fmt = "{:>10.3f} {:>11.3f}" if name == "fsdp/ddp" else "{:>10.1f} {:>11,.0f}"
        print(f"{name:10} " + fmt.format(row["samples_per_s"], row["bytes_per_rank"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
