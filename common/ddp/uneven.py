"""Uneven inputs under DDP: the wait without ``Join``, and what ``Join`` computes instead.

    torchrun --standalone --nproc_per_node=2 -m common.ddp.uneven --batches 16 14
    torchrun --standalone --nproc_per_node=2 -m common.ddp.uneven --batches 3 5 --out uneven.json

Rank ``r`` trains a small linear model on ``--batches[r]`` batches of random data, twice: in
plain DDP, where a rank that runs out leaves the others waiting in their next all-reduce until
the ``--timeout`` turns the wait into an error, and inside ``Join([model])``, where it shadows
their all-reduces until all have finished. Each attempt has a process group of its own, so the
first one's broken all-reduce cannot touch the second. Rank 0 prints one JSON report (and
writes it to ``--out``): per attempt and rank, the steps run, the error if any, and whether the
weights agree with every rank's and with ``join_reference``, the same training replayed in one
process.
"""

from __future__ import annotations

import datetime
import json
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

from common.cli import fail, finite, is_file_or_absent, option, parse_dataclass_args, positive
from common.ddp.process_group import gather_objects

#: The stand-in model: inputs, classes.
FEATURES, CLASSES = 8, 3


@dataclass
class UnevenConfig:
    """The command line of ``python -m common.ddp.uneven``."""

    batches: tuple[int, ...] = option((16, 14), "batches of each rank, one number per rank",
                                      nargs="+")
    batch_size: int = option(32, "samples per batch")
    timeout: float = option(2.0, "seconds a rank waits in a collective before it fails")
    lr: float = option(0.1, "SGD learning rate")
    out: Path | None = option(None, "also write the JSON report here")


def validate(config: UnevenConfig) -> dict[str, str]:
    """Problems of a parsed configuration, by field (the world size is checked at run time)."""
    problems = {**positive(config, "batches", "batch_size"), **finite(config, "timeout", "lr"),
                **is_file_or_absent(config, "out")}
    for name in ("timeout", "lr"):
        if name not in problems and not getattr(config, name) > 0:
            problems[name] = f"must be above 0, got {getattr(config, name)}"
    return problems


def make_batches(rank: int, count: int, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` batches of random inputs and labels, the same for ``rank`` on every run.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    generator = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(batch_size, FEATURES, generator=generator),
             torch.randint(CLASSES, (batch_size,), generator=generator)) for _ in range(count)]


def fresh_model() -> nn.Linear:
    """The stand-in model, with the same initial weights on every rank and in every run.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    torch.manual_seed(0)
    return nn.Linear(FEATURES, CLASSES)


def flat_weights(model: nn.Module) -> torch.Tensor:
    """All parameters of ``model`` in one flat tensor (to compare replicas).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def join_reference(batches: list[list[tuple[torch.Tensor, torch.Tensor]]], *,
                   lr: float) -> torch.Tensor:
    """The weights DDP under ``Join`` ends with, computed in one process.

    Step ``k`` averages the gradients of the ranks that still have a batch ``k`` over the
    *initial* world size (``Join``'s default ``divide_by_initial_world_size=True``: a rank that
    has run out contributes zeros), and SGD applies it; every rank ends with the weights of
    the rank that ran longest, which DDP broadcasts when the last rank joins.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    model = fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(max(len(mine) for mine in batches)):
        optimizer.zero_grad()
        for mine in batches:
            if step < len(mine):
                images, labels = mine[step]
                (nn.functional.cross_entropy(model(images), labels) / len(batches)).backward()
        optimizer.step()
    return flat_weights(model)


def attempt(batches: list[tuple[torch.Tensor, torch.Tensor]], group: dist.ProcessGroup, *,
            join: bool, lr: float) -> dict:
    """Train a fresh DDP model in ``group`` on this rank's ``batches``.

    Returns:
        ``{"join", "batches", "steps", "error", "weights"}``: ``error`` is the first line of a
        failed collective's message (``None`` if all went well), ``weights`` a flat tensor.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    model = DistributedDataParallel(fresh_model(), process_group=group)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    steps, error = 0, None
    try:
        with Join([model]) if join else nullcontext():
            for images, labels in batches:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(images), labels).backward()
                optimizer.step()
                steps += 1
    except RuntimeError as failure:  # a collective that timed out, or whose peer is gone
        error = str(failure).strip().splitlines()[0].split("] ")[-1]  # without gloo's source line
    return {"join": join, "batches": len(batches), "steps": steps, "error": error,
            "weights": flat_weights(model.module)}


def report(results: list[list[dict]], reference: torch.Tensor) -> list[dict]:
    """One row per attempt and rank: steps, error, and whether the weights agree.

    ``results[rank]`` holds that rank's attempts in order.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    rows = []
    for index in range(len(results[0])):
        weights = [mine[index]["weights"] for mine in results]
        for rank, mine in enumerate(results):
            row = {key: value for key, value in mine[index].items() if key != "weights"}
            rows.append({"rank": rank, **row,
                         "equal_on_all_ranks": all(torch.equal(w, weights[0]) for w in weights),
                         "equal_to_reference": torch.allclose(weights[rank], reference,
                                                              atol=1e-6)})
    return rows


def run(config: UnevenConfig, rank: int, world_size: int) -> list[dict] | None:
    """Both attempts on this rank; the report on rank 0 (``None`` elsewhere)."""
    mine = make_batches(rank, config.batches[rank], config.batch_size)
    results = []
    for join in (False, True):
        group = dist.new_group(timeout=datetime.timedelta(seconds=config.timeout))
        results.append(attempt(mine, group, join=join, lr=config.lr))
        dist.barrier()  # a rank that finished early waits here, not in the next attempt
        dist.destroy_process_group(group)  # after the barrier: no peer is left waiting in it
    everyone = gather_objects(results)
    if rank != 0:
        return None
    reference = join_reference([make_batches(r, config.batches[r], config.batch_size)
                                for r in range(world_size)], lr=config.lr)
    return report(everyone, reference)


def main(argv: list[str] | None = None) -> int:
    """Run both attempts under ``torchrun``; rank 0 prints the JSON report.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    config = parse_dataclass_args(UnevenConfig, argv, description=__doc__.splitlines()[0],
                                  validate=validate)
    if not dist.is_torchelastic_launched():
        return fail("run it under torchrun: torchrun --standalone --nproc_per_node=2 "
                    "-m common.ddp.uneven", prog="common.ddp.uneven")
    dist.init_process_group("gloo")
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        if len(config.batches) != world_size:  # every rank stops; rank 0 says why
            message = f"--batches: {len(config.batches)} numbers for {world_size} ranks"
            return fail(message, prog="common.ddp.uneven") if rank == 0 else 1
        rows = run(config, rank, world_size)
    finally:
        dist.destroy_process_group()
    if rows is not None:
        text = json.dumps(rows, indent=1)
        print(text, flush=True)
        if config.out is not None:
            config.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
