"""在 N 个进程上演示四种集合通信、DDP 的梯度平均，以及一次全归约的开销。

    torchrun --standalone --nproc_per_node=2 chapters/scripts/04_1/collectives.py --repeats 15
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

SIZES = (2**8, 2**12, 2**16, 2**18, 2**20, 2**22)  # 每次计时的 all_reduce 中 float32 值的个数


def say(rank: int, text: str) -> None:
    print(f"rank {rank}: {text}\n", end="", flush=True)  # 每行只写一次：两个 rank 共用一个管道


def collectives(rank: int, world_size: int) -> None:
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value, op=dist.ReduceOp.SUM)  # 每个 rank 都收到 1 + 2 + ...
    say(rank, f"all_reduce(SUM) of rank + 1: {rank + 1} -> {value.item():.0f}")

    message = torch.tensor([42.0, 7.0]) if rank == 0 else torch.zeros(2)
    dist.broadcast(message, src=0)  # rank 0 的张量，复制到每个 rank 的张量中
    say(rank, f"broadcast from rank 0: {message.tolist()}")

    mine = torch.tensor([10.0 * rank, 10.0 * rank + 1])
    everyone = [torch.zeros(2) for _ in range(world_size)]
    dist.all_gather(everyone, mine)  # 每个 rank 都按 rank 顺序收到所有 rank 的张量
    say(rank, f"all_gather: {[t.tolist() for t in everyone]}")

    started = time.perf_counter()
    time.sleep(0.3 * rank)  # 最后一个 rank 晚到
    arrived = time.perf_counter()
    dist.barrier()  # 所有人到齐之前谁都不能离开
    say(rank, f"barrier: arrived after {arrived - started:.2f} s, left after "
        f"{time.perf_counter() - started:.2f} s")


def ddp_gradients(rank: int, world_size: int) -> None:
    torch.manual_seed(0)  # 每个 rank 上是同一个模型、同一个批次
    model = nn.Linear(4, 1)
    images, targets = torch.randn(8, 4), torch.randn(8, 1)
    whole = nn.functional.mse_loss(model(images), targets)
    expected = torch.autograd.grad(whole, model.weight)[0]  # 整个批次的梯度
    ddp = DDP(model)  # 保留引用：它的钩子在 backward() 期间对梯度做全归约
    half = slice(rank, None, world_size)  # 本 rank 的那一半批次
    nn.functional.mse_loss(ddp(images[half]), targets[half]).backward()
    gap = (model.weight.grad - expected).abs().max().item()
    say(rank, f"DDP gradient of my half == gradient of the whole batch: {gap < 1e-6} (max diff {gap:.1e})")


def allreduce_ms(repeats: int) -> dict[int, float]:
    """每种张量大小在 ``repeats`` 次 all_reduce 调用中最快的一次，单位为毫秒。"""
    tensors = [torch.ones(size) for size in SIZES]
    for values in tensors:
        for _ in range(2):
            dist.all_reduce(values)  # 不计时：最初的调用要建立缓冲区和连接
    fastest = [float("inf")] * len(SIZES)
    for _ in range(repeats):
        for i, values in enumerate(tensors):  # 依次轮流测所有大小：突发的负载对每种大小影响相同
            dist.barrier()  # 同时开始
            started = time.perf_counter()
            dist.all_reduce(values)
            fastest[i] = min(fastest[i], time.perf_counter() - started)
    return {size: 1e3 * seconds for size, seconds in zip(SIZES, fastest, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds over the sizes")
    args = parser.parse_args()
    torch.set_num_threads(1)  # 每个进程一个核心
    dist.init_process_group("gloo")  # torchrun 设置的环境变量说明了谁是谁、在哪里会合
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        say(rank, f"world_size={world_size} backend={dist.get_backend()}")
        collectives(rank, world_size)
        ddp_gradients(rank, world_size)
        timings = allreduce_ms(args.repeats)
        if rank == 0:
            say(rank, "all_reduce ms by size: " + " ".join(f"{n}:{ms:.3f}" for n, ms in timings.items()))
    finally:
        dist.destroy_process_group()  # 无论以何种方式退出都会执行，出错时也一样


if __name__ == "__main__":
    main()
