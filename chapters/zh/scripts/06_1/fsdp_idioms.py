import json
import os
import sys

import torch
import torch.distributed as dist
from fsdp_script import build_model  # 种子 0，4 个块加一个输出头，与上面相同
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import fully_shard


def sharded_on_meta() -> nn.Module:
    with torch.device("meta"):
        model = build_model()  # 只有形状：没有内存，也没有数值
    for block in model[:-1]:
        fully_shard(block)
    fully_shard(model)            # 仅凭形状就切成 Shard(0) 分片
    model.to_empty(device="cpu")  # 本 rank 的分片：已分配内存，未初始化
    return model


def accumulate(model: nn.Module, micro_batches: list) -> bool:
    """对每个微批次做反向传播，只在最后一个之后做归约散射；如果在最后一个之前
    还不存在任何分片后的梯度，就返回 True。"""
    for index, (x, y) in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        model.set_requires_gradient_sync(last)  # False：在这里保留未分片的梯度
        untouched = all(p.grad is None for p in model.parameters())
        (nn.functional.cross_entropy(model(x), y) / len(micro_batches)).backward()
    return untouched


def farthest(sharded, plain) -> float:
    return max((s.full_tensor() - p).abs().max().item() for s, p in zip(sharded, plain, strict=True))


def main() -> None:
    out = sys.argv[1]  # 存放报告的文件夹
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    reference = build_model()  # 单个进程训练的模型：未分片
    model = sharded_on_meta()
    for module in model.modules():  # 从头开始：每一层初始化自己的分片
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    weight = model[0][0].weight.full_tensor()
    report = {"rank": rank, "reset: rows 0-31 == rows 32-63": torch.equal(weight[:32], weight[32:])}
    full = reference.state_dict() if rank == 0 else {}  # 只有 rank 0 持有全量状态字典
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True,
                                                               broadcast_from_rank0=True))
    report["loaded: max |w - one process|"] = farthest(model.parameters(), reference.parameters())
    gen = torch.Generator().manual_seed(1)
    images, labels = torch.randn(16, 64, generator=gen), torch.randint(0, 6, (16,), generator=gen)
    nn.functional.cross_entropy(reference(images), labels).backward()  # 一个 16 个样本的批次
    x, y = images.chunk(world_size)[rank], labels.chunk(world_size)[rank]  # 本 rank 的 8 个样本
    micro_batches = list(zip(x.chunk(2), y.chunk(2), strict=True))  # 2 个微批次，每个 4 个样本
    report["no sharded grad until the last"] = accumulate(model, micro_batches)
    grads, plain = [p.grad for p in model.parameters()], [p.grad for p in reference.parameters()]
    report["accumulated: max |g - one batch|"] = farthest(grads, plain)
    local = torch.stack([torch.linalg.vector_norm(g.to_local()) for g in grads])
    report["norm of the local shards"] = torch.linalg.vector_norm(local).item()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.1)  # 一个分布式张量（DTensor）
    report["clip_grad_norm_: total norm"] = total.full_tensor().item()
    one_process = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=0.1)
    report["one process: total norm"] = one_process.item()
    report["clipped: max |g - one process|"] = farthest(grads, plain)
    with open(os.path.join(out, f"idioms_rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
