"""DDP on ranks with different numbers of batches: plain, then inside Join.

    torchrun --standalone --nproc_per_node=2 uneven.py --batches 16 14
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP


def say(rank: int, text: str) -> None:
    print(f"rank {rank}: {text}\n", end="", flush=True)  # one write per line: both ranks share a pipe


def train(model: DDP, batches: list, optimizer: torch.optim.Optimizer) -> None:
    for inputs, labels in batches:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), labels).backward()  # DDP all-reduces here
        optimizer.step()


def run(batches: list, *, join: bool, timeout: float) -> torch.Tensor:
    """Train a fresh model in a process group of its own; return its weights."""
    rank = dist.get_rank()
    group = dist.new_group(timeout=datetime.timedelta(seconds=timeout))
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DDP(nn.Linear(8, 3), process_group=group)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    started = time.perf_counter()
    try:
        with Join([model], enable=join):  # a rank that runs out shadows the others' all-reduces
            train(model, batches, optimizer)
        say(rank, f"join={join}: trained on all {len(batches)} batches")
    except RuntimeError as error:  # left waiting in an all-reduce: the timeout ended the wait
        message = str(error).split("] ")[-1]  # without gloo's source file
        say(rank, f"join={join}: failed after {time.perf_counter() - started:.1f} s: {message}")
    dist.barrier()  # a rank that finished early waits here, not in the next run's all-reduces
    dist.destroy_process_group(group)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", required=True, help="batches per rank")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds an all-reduce may wait")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per process
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        generator = torch.Generator().manual_seed(rank)  # each rank its own data, its own count
        batches = [(torch.randn(32, 8, generator=generator), torch.randint(3, (32,), generator=generator))
                   for _ in range(args.batches[rank])]
        run(batches, join=False, timeout=args.timeout)
        weights = run(batches, join=True, timeout=args.timeout)
        everyone = [torch.zeros_like(weights) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, weights)
        say(rank, f"join=True: weights equal on all ranks: {all(torch.equal(w, weights) for w in everyone)}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
