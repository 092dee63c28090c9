"""各 rank 的批次数不同时的 DDP：先直接运行，再放进 Join 里运行。

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
    print(f"rank {rank}: {text}\n", end="", flush=True)  # 每行只写一次：两个 rank 共用一个管道


def train(model: DDP, batches: list, optimizer: torch.optim.Optimizer) -> None:
    for inputs, labels in batches:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), labels).backward()  # DDP 在这里做全归约
        optimizer.step()


def run(batches: list, *, join: bool, timeout: float) -> torch.Tensor:
    """在一个独立的进程组中训练一个新模型；返回它的权重。"""
    rank = dist.get_rank()
    group = dist.new_group(timeout=datetime.timedelta(seconds=timeout))
    torch.manual_seed(0)  # 每个 rank 上的初始权重都相同
    model = DDP(nn.Linear(8, 3), process_group=group)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    started = time.perf_counter()
    try:
        with Join([model], enable=join):  # 用完批次的 rank 以影子方式参与其他 rank 的全归约
            train(model, batches, optimizer)
        say(rank, f"join={join}: trained on all {len(batches)} batches")
    except RuntimeError as error:  # 被留在全归约里等待：超时结束了这次等待
        message = str(error).split("] ")[-1]  # 去掉 gloo 的源文件位置
        say(rank, f"join={join}: failed after {time.perf_counter() - started:.1f} s: {message}")
    dist.barrier()  # 提前结束的 rank 在这里等待，而不是在下一次运行的全归约里
    dist.destroy_process_group(group)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", required=True, help="batches per rank")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds an all-reduce may wait")
    args = parser.parse_args()
    torch.set_num_threads(1)  # 每个进程一个核心
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        generator = torch.Generator().manual_seed(rank)  # 每个 rank 有自己的数据、自己的批次数
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
