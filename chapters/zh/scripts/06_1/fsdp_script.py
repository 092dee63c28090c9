import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


def build_model() -> nn.Module:
    torch.manual_seed(0)  # 每个 rank 上的初始权重都相同
    blocks = [nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(4)]
    return nn.Sequential(*blocks, nn.Linear(64, 6))


def local_bytes(tensors) -> int:
    return sum((t.to_local() if isinstance(t, DTensor) else t).nbytes for t in tensors)


def main() -> None:
    out = sys.argv[1]  # 存放报告的文件夹
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")  # GPU 上用 "nccl"
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    model = build_model()
    if distributed:
        for block in model[:-1]:
            fully_shard(block)  # 一个单元：前向之前收集完整，之后释放
        fully_shard(model)      # 根单元：输出头，以及驱动各个单元的钩子
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    images, labels = torch.randn(16, 64, generator=gen), torch.randint(0, 6, (16,), generator=gen)
    for _step in range(3):  # 全局批次为 16：每个 rank 取自己的那一块
        x, y = images.chunk(world_size)[rank], labels.chunk(world_size)[rank]
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()  # 对梯度做归约散射
        optimizer.step()                                      # 只作用于本地分片
    weight = model[0][0].weight
    held = {"parameters": local_bytes(p.data for p in model.parameters()),
            "gradients": local_bytes(p.grad for p in model.parameters()),
            "optimizer": local_bytes(v for s in optimizer.state.values() for v in s.values())}
    local_shape = tuple((weight.to_local() if isinstance(weight, DTensor) else weight).shape)
    report = {"rank": rank, "world size": world_size, "weight type": type(weight).__name__,
              "global shape": tuple(weight.shape), "placements": str(getattr(weight, "placements", "-")),
              "local shape": local_shape, **held}
    with open(os.path.join(out, f"rank{rank}_of_{world_size}.json"), "w") as f:
        json.dump(report, f)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))
    if rank == 0:  # 完整的权重，由各分片收集而来
        torch.save(state, os.path.join(out, f"weights_{world_size}.pt"))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
