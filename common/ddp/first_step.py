"""Seconds from launch to the first optimizer step: ``common.ddp.train`` beside pytorch/examples.

    python -m common.ddp.first_step                      # 5 interleaved rounds, 2 ranks
    python -m common.ddp.first_step --rounds 7 --data DIR   # e.g. Chapter 7's digits

Each round launches, one after the other (which one first alternates by round), two commands
under ``torchrun --standalone`` with ``--ranks`` processes of one thread each, gloo on the CPU,
on the same ImageFolder (``--data``; default: the repository's shapes as an ImageFolder;
docs/figures.md's figure: scikit-learn's handwritten digits as ``common.images.digits`` writes
them for Chapter 7), ``resnet18``, SGD, the same global batch and crop size, no DataLoader
workers:

- ``train``: ``python -m common.ddp.train`` with its defaults otherwise (seeded augmentation,
  ``--normalize auto``: the training split's own statistics, computed by the first launch and
  read from beside the cache afterwards, the folder's check and listing);
- ``examples``: ``python -m common.ddp.examples_main``, pytorch/examples' ``imagenet/main.py``
  as it launches (its docstring says what is kept and what changed).

Both print a JSON line ``{"event": "first_step", "time": ..., "cpu_s": ...}`` once rank 0's first
optimizer step has returned; a launch's figure is that time minus the moment the launcher was started
(torchrun's own start, every rank's Python start and imports, the process group, the data and
the model included). Beside it, rank 0's CPU seconds until then (``cpu_s``, its imports
included: steadier than wall time on a shared machine), and those of every process of the launch
to its exit (``resource.RUSAGE_CHILDREN``). One launch of each runs first, untimed, so that both
find the files in the page cache and the trainer its statistics. The table holds the median seconds of each and the
ratio to examples'; ``first_step.csv`` and ``first_step.json`` (every round, the load average)
are written to ``--out``.

``--libraries-first`` launches each rank through ``common.ddp.first_step_rank``: it imports the
libraries both trainers share first, so the table adds rank 0's CPU seconds for them, for the
trainer's own imports and for its work from there to the end of its first step, each apart (the
libraries' import is the part that varies most from launch to launch).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import pandas as pd

from common.cli import option, parse_dataclass_args, positive
from common.ddp.launch import run_command, torchrun_command

BASELINE = "examples"
TRAINERS = ("train", BASELINE)
#: What each rank of a ``--libraries-first`` launch runs: the libraries, then the trainer.
RANK_WRAPPER = "common.ddp.first_step_rank"
#: The columns of a round: always the first three, the rest with ``--libraries-first``.
ROUND = ("seconds", "rank0_cpu_s", "launch_cpu_s", "libraries_cpu_s", "own_imports_cpu_s",
         "after_imports_cpu_s")


@dataclass
class FirstStepConfig:
    """The command line of ``python -m common.ddp.first_step``.

    Introduced in docs/scripts.md ("Time to the first step").
    """

    rounds: int = option(5, "interleaved rounds (the median is reported)")
    ranks: int = option(2, "processes of each launch")
    data: Path | None = option(None, "an ImageFolder root (default: the repository's shapes as one)")
    image_size: int = option(32, "side of the training crops")
    batch_size: int = option(64, "global batch (each of --ranks processes takes its share)")
    out: Path = option(Path("build/bench/first_step"), "output folder (CSV, JSON)")
    libraries_first: bool = option(False, "each rank imports the libraries both share first "
                                   "(common.ddp.first_step_rank): rank 0's CPU for them, for the "
                                   "trainer's own imports and for the rest to the first step, apart")


def first_step_record(stdout: str, command: str = "the launch") -> tuple[float, float]:
    """``(time, cpu_s)`` of the first ``{"event": "first_step", ...}`` JSON line in ``stdout``:
    when rank 0's first optimizer step returned, and rank 0's CPU seconds until then.

    Raises:
        ValueError: Naming ``command`` when no such line was printed.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    return _record(stdout, "first_step", ("time", "cpu_s"), command)


def libraries_record(stdout: str, command: str = "the launch") -> tuple[float, float]:
    """``(libraries_cpu_s, imports_cpu_s)`` of the ``{"event": "libraries", ...}`` line that rank 0
    of a ``--libraries-first`` launch prints (``common.ddp.first_step_rank``).

    Raises:
        ValueError: Naming ``command`` when no such line was printed.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    return _record(stdout, "libraries", ("libraries_cpu_s", "imports_cpu_s"), command,
                   " (is it a --libraries-first launch?)")


def _record(stdout: str, event: str, fields: tuple[str, str], command: str,
            hint: str = "") -> tuple[float, float]:
    # The fields of the first JSON line of stdout whose "event" is event.
    for line in stdout.splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            record = json.loads(line)
            if record.get("event") == event:
                return float(record[fields[0]]), float(record[fields[1]])
    raise ValueError(f"{command} printed no {event} record{hint}")


def commands(config: FirstStepConfig, data: Path) -> dict[str, list[str]]:
    """The torchrun command of each trainer, ``{name: argv}`` (``TRAINERS``).

    Introduced in docs/scripts.md ("Time to the first step").
    """
    per_rank = config.batch_size // config.ranks
    size = str(config.image_size)
    train = ["--data", str(data), "--model", "resnet18", "--image-size", size, "--batch-size",
             str(config.batch_size), "--optimizer", "sgd", "--lr", "0.1", "--weight-decay", "1e-4",
             "--num-epochs", "1", "--max-steps", "1", "--threads", "1", "--num-workers", "0"]
    examples = [str(data), "--arch", "resnet18", "--image-size", size, "-b", str(per_rank),
                "--lr", "0.1", "--wd", "1e-4", "--max-steps", "1", "-j", "0"]
    targets = {"train": ("common.ddp.train", train), BASELINE: ("common.ddp.examples_main", examples)}
    if config.libraries_first:
        return {name: torchrun_command(RANK_WRAPPER, [module, *args], nproc_per_node=config.ranks)
                for name, (module, args) in targets.items()}
    return {name: torchrun_command(module, args, nproc_per_node=config.ranks)
            for name, (module, args) in targets.items()}


def launch(name: str, command: list[str], *, libraries_first: bool = False) -> tuple[float, ...]:
    """``(seconds, rank 0's CPU seconds, the launch's CPU seconds)`` of one run of ``command``;
    with ``libraries_first``, rank 0's CPU seconds for the shared libraries, for the trainer's own
    imports and for the rest up to its first step follow (``ROUND``).

    The seconds run from starting ``command`` (trainer ``name``) to the time its first-step
    record says; rank 0's CPU seconds are its process's until then (its imports included: the
    steadiest figure on a shared machine); the launch's are those of every process it started
    (torchrun and its ranks, user and system) to their exit.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    before, started = _children_cpu(), time.time()
    done = run_command(command, timeout=600, threads=1)
    at, rank0_cpu = first_step_record(done.stdout, name)
    measured = (at - started, rank0_cpu, _children_cpu() - before)
    if not libraries_first:
        return measured
    libraries, imports = libraries_record(done.stdout, name)
    return (*measured, libraries, imports, rank0_cpu - libraries - imports)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def summarize(rounds: dict[str, list[tuple[float, ...]]]) -> pd.DataFrame:
    """Per trainer: the median, fastest and slowest seconds to the first step, the median CPU
    seconds of rank 0 to it and of the whole launch, and the medians' ratios to examples'; with
    ``--libraries-first`` rounds, the medians of rank 0's CPU seconds for the shared libraries, the
    trainer's own imports and the rest up to the first step too.

    ``rounds``: ``{trainer: [(seconds, rank0_cpu_s, launch_cpu_s[, libraries_cpu_s,
    own_imports_cpu_s, after_imports_cpu_s]), ...]}`` (``launch``), examples' included.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    column = {name: list(zip(*values, strict=True)) for name, values in rounds.items()}
    median = {name: [statistics.median(values) for values in columns]
              for name, columns in column.items()}
    base = median[BASELINE]
    table = pd.DataFrame({"trainer": list(rounds), "rounds": [len(v) for v in rounds.values()],
                          "median_s": [m[0] for m in median.values()],
                          "min_s": [min(c[0]) for c in column.values()],
                          "max_s": [max(c[0]) for c in column.values()],
                          "vs_examples": [m[0] / base[0] for m in median.values()],
                          "rank0_cpu_s": [m[1] for m in median.values()],
                          "rank0_cpu_vs_examples": [m[1] / base[1] for m in median.values()],
                          "launch_cpu_s": [m[2] for m in median.values()]})
    for index in range(3, len(base)):
        table[ROUND[index]] = [m[index] for m in median.values()]
    return table


def _shapes_folder() -> Path:
    # The repository's shapes as an ImageFolder (common.ensure_data writes that view too).
    from common.synthetic import ensure_data

    return ensure_data(verbose=False).imagefolder_dir("train").parent


def _load() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.ddp.first_step``.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    config = parse_dataclass_args(FirstStepConfig, argv, description=__doc__.splitlines()[0],
                                  validate=lambda c: positive(c, "rounds", "ranks", "image_size",
                                                              "batch_size"))
    config.out.mkdir(parents=True, exist_ok=True)
    data = config.data if config.data is not None else _shapes_folder()
    launches = commands(config, data)
    measure = partial(launch, libraries_first=config.libraries_first)
    for name, command in launches.items():  # untimed: the page cache, the trainer's statistics
        measure(name, command)
    rounds: dict[str, list[tuple[float, ...]]] = {name: [] for name in TRAINERS}
    loads = [_load()]
    for index in range(config.rounds):
        for name in TRAINERS if index % 2 == 0 else TRAINERS[::-1]:
            rounds[name].append(measure(name, launches[name]))
        print(f"round {index + 1}/{config.rounds}: " + ", ".join(
            f"{name} {values[-1][0]:.2f} s (rank 0 {values[-1][1]:.1f} s CPU)"
            for name, values in rounds.items()), flush=True)
    loads.append(_load())
    table = summarize(rounds)
    table.to_csv(config.out / "first_step.csv", index=False, float_format="%.3f")
    (config.out / "first_step.json").write_text(json.dumps({
        "config": {**asdict(config), "out": str(config.out), "data": str(data)},
        "machine": {"cores": os.cpu_count(), "load_average_1min": loads}, "rounds": rounds},
        indent=1))
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    if None not in loads:
        print(f"seconds from launch to the end of rank 0's first optimizer step, {config.ranks} "
              f"ranks (CPU seconds: rank 0's to its first step, the whole launch's to its exit); load average {loads[0]:.1f} before, {loads[1]:.1f} after, on "
              f"{os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
