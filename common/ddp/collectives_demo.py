"""The four collectives, and DDP's gradient averaging, run for real on N processes.

    torchrun --standalone --nproc_per_node=2 -m common.ddp.collectives_demo
    python -m common.ddp.collectives_demo          # one process: world_size 1, no process group

Every rank computes; rank 0 prints what all ranks hold, in rank order (the ranks'
lines are gathered first, so the output does not interleave).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from common.cli import parse_dataclass_args
from common.ddp.process_group import (
    DistInfo,
    cleanup_distributed,
    gather_objects,
    is_main_process,
    setup_distributed,
    wrap_model,
)


def _show(info: DistInfo, title: str, line: str) -> None:
    lines = gather_objects(line)
    if is_main_process():
        print(f"== {title}")
        for rank, text in enumerate(lines):
            print(f"  rank {rank}: {text}")
        sys.stdout.flush()


def demo_identity(info: DistInfo) -> None:
    """Who each process is.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    _show(info, "identity", f"local_rank={info.local_rank} world_size={info.world_size} "
          f"backend={info.backend} device={info.device}")


def demo_collectives(info: DistInfo) -> None:
    """``all_reduce``, ``broadcast``, ``all_gather`` and ``barrier`` on small tensors.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    value = torch.tensor([info.rank + 1.0], device=info.device)
    _show(info, "all_reduce(SUM) of rank + 1", f"before={value.item():.0f}")
    if info.initialized:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    _show(info, "all_reduce(SUM) of rank + 1", f"after={value.item():.0f}")

    message = torch.tensor([42.0, 7.0] if is_main_process() else [0.0, 0.0], device=info.device)
    if info.initialized:
        dist.broadcast(message, src=0)
    _show(info, "broadcast from rank 0", f"{message.tolist()}")

    mine = torch.tensor([10.0 * info.rank, 10.0 * info.rank + 1], device=info.device)
    everyone = [torch.zeros_like(mine) for _ in range(info.world_size)]
    if info.initialized:
        dist.all_gather(everyone, mine)
    else:
        everyone = [mine]
    _show(info, "all_gather", f"{[t.tolist() for t in everyone]}")

    started = time.perf_counter()
    time.sleep(0.3 * info.rank)  # the last rank arrives late; everyone waits for it
    if info.initialized:
        dist.barrier()
    waited = time.perf_counter() - started
    late = 0.3 * (info.world_size - 1)
    _show(info, "barrier", f"left the barrier after >= {late:.1f} s: {waited >= late - 0.05}")


def demo_ddp_gradients(info: DistInfo) -> None:
    """Each rank backpropagates its half of a batch; DDP's all-reduce averages the
    gradients, so every rank ends with the gradient of the whole batch.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    torch.manual_seed(0)
    model = nn.Linear(4, 1).to(info.device)
    images = torch.randn(8, 4, device=info.device)
    targets = torch.randn(8, 1, device=info.device)
    full = nn.functional.mse_loss(model(images), targets)
    expected = torch.autograd.grad(full, model.weight)[0]
    ddp = wrap_model(model, info)
    shard = slice(info.rank, None, info.world_size)
    nn.functional.mse_loss(ddp(images[shard]), targets[shard]).backward()
    grad = model.weight.grad
    _show(info, "DDP gradient of my half == gradient of the whole batch",
          f"{torch.allclose(grad, expected, atol=1e-6)} (max diff {(grad - expected).abs().max():.1e})")


#: Tensor sizes (float32 values) whose all-reduce time ``demo_allreduce_cost`` measures.
COST_SIZES = (2**8, 2**12, 2**16, 2**18, 2**20, 2**22)
#: Timed rounds per size, and untimed calls per size before them (the first calls set up
#: gloo's buffers and connections).
COST_REPEATS, COST_WARMUP = 15, 2


def allreduce_seconds(info: DistInfo, sizes: tuple[int, ...] = COST_SIZES, *,
                      repeats: int = COST_REPEATS, warmup: int = COST_WARMUP
                      ) -> dict[int, list[float]]:
    """Seconds of each timed ``all_reduce``, by tensor size (float32 values).

    The rounds go over all sizes in turn (size 1, 2, ..., then again), so a burst of load
    from another program spreads over every size instead of making one size look slow;
    a barrier before each call lets the ranks start together.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    tensors = {size: torch.ones(size, device=info.device) for size in sizes}
    for values in tensors.values():
        for _ in range(warmup if info.initialized else 0):
            dist.all_reduce(values)
    seconds: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(repeats):
        for size, values in tensors.items():
            if info.initialized:
                dist.barrier()
            started = time.perf_counter()
            if info.initialized:
                dist.all_reduce(values)
            seconds[size].append(time.perf_counter() - started)
    return seconds


def fastest_ms(seconds: dict[int, list[float]]) -> str:
    """``size:ms`` pairs of the fastest call per size, the cost without interruptions.

    On a machine shared with other work a median still carries the interruptions (a rank
    descheduled while its peer waits); the minimum is what the collective itself costs.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    return " ".join(f"{size}:{1e3 * min(times):.3f}" for size, times in seconds.items())


def demo_allreduce_cost(info: DistInfo, *, repeats: int = COST_REPEATS) -> None:
    """Milliseconds of one ``all_reduce`` per tensor size (fastest of ``repeats``), as
    ``size:ms`` pairs.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    timings = fastest_ms(allreduce_seconds(info, repeats=repeats))
    _show(info, "all_reduce milliseconds by tensor size (float32 values)", timings)


@dataclass
class DemoConfig:
    """``python -m common.ddp.collectives_demo`` takes no options (run it under torchrun)."""


def main(argv: list[str] | None = None) -> int:
    """Run every demo on this rank.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    parse_dataclass_args(DemoConfig, argv, description=__doc__.splitlines()[0])
    info = setup_distributed()
    try:
        demo_identity(info)
        demo_collectives(info)
        demo_ddp_gradients(info)
        demo_allreduce_cost(info)
    finally:
        cleanup_distributed()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
