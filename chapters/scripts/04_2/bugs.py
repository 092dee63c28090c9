"""Two bugs on purpose, on 2 gloo ranks: collectives that do not match, then a rank that hangs.

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 chapters/scripts/04_2/bugs.py \
        --stacks runs/04_2/bugs/stacks
"""

import argparse
import datetime
import faulthandler
import time
from pathlib import Path

import torch
import torch.distributed as dist


def say(rank: int, text: str) -> None:
    print(f"rank {rank}: {text}\n", end="", flush=True)  # one write per line: both ranks share a pipe


def mismatched(rank: int) -> None:
    try:
        dist.all_reduce(torch.ones(2 + rank))  # 2 values on rank 0, 3 on rank 1
    except RuntimeError as error:
        say(rank, f"shapes: {error}")
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(2))
        else:
            dist.broadcast(torch.ones(2), src=0)  # another collective than rank 0's
    except RuntimeError as error:
        say(rank, f"operations: {error}")


def load_batch(rank: int) -> torch.Tensor:
    if rank == 1:
        time.sleep(60)  # a stuck data loader: rank 1 never reaches the all-reduce
    return torch.ones(2)


def train_step(rank: int) -> None:
    batch = load_batch(rank)
    dist.all_reduce(batch)  # rank 0 waits here for rank 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", type=Path, required=True, help="folder for the stack dumps")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds a collective may wait")
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    args.stacks.mkdir(parents=True, exist_ok=True)
    dump = open(args.stacks / f"rank{rank}.stack", "w")  # stays open: faulthandler writes into it
    try:
        mismatched(rank)
        faulthandler.dump_traceback_later(1.0, file=dump)  # a watchdog: still in the step after 1 s? dump
        train_step(rank)
        faulthandler.cancel_dump_traceback_later()
    except RuntimeError as error:  # the timeout: rank 0's all-reduce gave up
        say(rank, f"step: {error}")
        raise SystemExit(1) from None
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
