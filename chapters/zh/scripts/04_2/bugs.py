"""在 2 个 gloo rank 上故意制造两个错误：先是对不上的集合通信，再是一个挂起的 rank。

    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 chapters/scripts/04_2/bugs.py         --stacks runs/04_2/bugs/stacks
"""

import argparse
import datetime
import faulthandler
import time
from pathlib import Path

import torch
import torch.distributed as dist


def say(rank: int, text: str) -> None:
    print(f"rank {rank}: {text}\n", end="", flush=True)  # 每行只写一次：两个 rank 共用一个管道


def mismatched(rank: int) -> None:
    try:
        dist.all_reduce(torch.ones(2 + rank))  # rank 0 上 2 个值，rank 1 上 3 个
    except RuntimeError as error:
        say(rank, f"shapes: {error}")
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(2))
        else:
            dist.broadcast(torch.ones(2), src=0)  # 与 rank 0 不同的集合通信
    except RuntimeError as error:
        say(rank, f"operations: {error}")


def load_batch(rank: int) -> torch.Tensor:
    if rank == 1:
        time.sleep(60)  # 卡住的数据加载器：rank 1 永远到不了全归约
    return torch.ones(2)


def train_step(rank: int) -> None:
    batch = load_batch(rank)
    dist.all_reduce(batch)  # rank 0 在这里等待 rank 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", type=Path, required=True, help="folder for the stack dumps")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds a collective may wait")
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    args.stacks.mkdir(parents=True, exist_ok=True)
    dump = open(args.stacks / f"rank{rank}.stack", "w")  # 保持打开：faulthandler 会往里面写
    try:
        mismatched(rank)
        faulthandler.dump_traceback_later(1.0, file=dump)  # 看门狗：1 s 后还在这一步里？那就转储
        train_step(rank)
        faulthandler.cancel_dump_traceback_later()
    except RuntimeError as error:  # 超时：rank 0 的全归约放弃了
        say(rank, f"step: {error}")
        raise SystemExit(1) from None
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
