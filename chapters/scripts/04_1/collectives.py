"""The four collectives on N processes, DDP's gradient averaging, and the cost of an all-reduce.

    torchrun --standalone --nproc_per_node=2 chapters/scripts/04_1/collectives.py --repeats 15
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

SIZES = (2**8, 2**12, 2**16, 2**18, 2**20, 2**22)  # float32 values per timed all_reduce


def say(rank: int, text: str) -> None:
    print(f"rank {rank}: {text}\n", end="", flush=True)  # one write per line: both ranks share a pipe


def collectives(rank: int, world_size: int) -> None:
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value, op=dist.ReduceOp.SUM)  # every rank receives 1 + 2 + ...
    say(rank, f"all_reduce(SUM) of rank + 1: {rank + 1} -> {value.item():.0f}")

    message = torch.tensor([42.0, 7.0]) if rank == 0 else torch.zeros(2)
    dist.broadcast(message, src=0)  # rank 0's tensor, copied into every rank's
    say(rank, f"broadcast from rank 0: {message.tolist()}")

    mine = torch.tensor([10.0 * rank, 10.0 * rank + 1])
    everyone = [torch.zeros(2) for _ in range(world_size)]
    dist.all_gather(everyone, mine)  # every rank receives every rank's tensor, in rank order
    say(rank, f"all_gather: {[t.tolist() for t in everyone]}")

    started = time.perf_counter()
    time.sleep(0.3 * rank)  # the last rank arrives late
    arrived = time.perf_counter()
    dist.barrier()  # nobody leaves before everybody has arrived
    say(rank, f"barrier: arrived after {arrived - started:.2f} s, left after "
        f"{time.perf_counter() - started:.2f} s")


def ddp_gradients(rank: int, world_size: int) -> None:
    torch.manual_seed(0)  # the same model and the same batch on every rank
    model = nn.Linear(4, 1)
    images, targets = torch.randn(8, 4), torch.randn(8, 1)
    whole = nn.functional.mse_loss(model(images), targets)
    expected = torch.autograd.grad(whole, model.weight)[0]  # the gradient of the whole batch
    ddp = DDP(model)  # keep a reference: its hooks all-reduce the gradients during backward()
    half = slice(rank, None, world_size)  # this rank's half of the batch
    nn.functional.mse_loss(ddp(images[half]), targets[half]).backward()
    gap = (model.weight.grad - expected).abs().max().item()
    say(rank, f"DDP gradient of my half == gradient of the whole batch: {gap < 1e-6} (max diff {gap:.1e})")


def allreduce_ms(repeats: int) -> dict[int, float]:
    """The fastest of ``repeats`` all_reduce calls per tensor size, in milliseconds."""
    tensors = [torch.ones(size) for size in SIZES]
    for values in tensors:
        for _ in range(2):
            dist.all_reduce(values)  # untimed: the first calls set up buffers and connections
    fastest = [float("inf")] * len(SIZES)
    for _ in range(repeats):
        for i, values in enumerate(tensors):  # all sizes in turn: a burst of load hits each alike
            dist.barrier()  # start together
            started = time.perf_counter()
            dist.all_reduce(values)
            fastest[i] = min(fastest[i], time.perf_counter() - started)
    return {size: 1e3 * seconds for size, seconds in zip(SIZES, fastest, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds over the sizes")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per process
    dist.init_process_group("gloo")  # torchrun's environment says who is who, and where to meet
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        say(rank, f"world_size={world_size} backend={dist.get_backend()}")
        collectives(rank, world_size)
        ddp_gradients(rank, world_size)
        timings = allreduce_ms(args.repeats)
        if rank == 0:
            say(rank, "all_reduce ms by size: " + " ".join(f"{n}:{ms:.3f}" for n, ms in timings.items()))
    finally:
        dist.destroy_process_group()  # on every way out, errors included


if __name__ == "__main__":
    main()
