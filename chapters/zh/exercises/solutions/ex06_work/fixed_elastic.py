"""在代理进程启动的各个 rank 上用 FSDP2 + 带动量的 SGD 训练，每一步之后在 DIR/step-N 写一个 DCP 检查点。
这是改好的版本：每次启动都从最新的完整检查点继续（连同优化器状态）；
不管 world size 是多少，每一步都在同样的 12 个样本上训练。

    torchrun --nnodes=1:2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT --max-restarts=1
        elastic_train.py --checkpoint DIR --out FILE --log-file LOG [--steps 12] [--step-delay S] [--resume]

LOG 里是一行一个 JSON 记录。每个 rank 在它的进程组从 "step" 开始训练时写
{"event": "start", "rank", "attempt", "world_size", "step", "samples"}（"samples"：它每一步训练的样本数）；
rank 0 每保存一个检查点写 {"event": "checkpoint", "step"}，把最终权重写到 FILE 之后写 {"event": "done", "rank", "step"}。
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import fully_shard

GLOBAL_BATCH = 12  # 每一步的样本数，由当前所有 rank 平分


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batch(step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)  # 第 N 步的批次，每个 rank 上都相同
    return torch.randn(size, 8, generator=generator), torch.randn(size, 4, generator=generator)


def newest_complete(root: Path) -> Path | None:
    """N 最大（按数值比较）的完整 step-N 文件夹（DCP 最后才写 .metadata）。"""
    complete = [p for p in root.glob("step-*") if (p / ".metadata").is_file()]
    return max(complete, key=lambda p: int(p.name.split("-")[1]), default=None)


def log(path: Path, event: str, **values) -> None:
    with path.open("a") as file:  # 每次只写一短行：各 rank 的行不会混在一起
        file.write(json.dumps({"event": event, **values, "time": time.time()}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--log-file", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--resume", action="store_true")  # 保留这个选项：每次启动都会尽量恢复
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    per_rank = GLOBAL_BATCH // world_size  # 2 个 rank 时每个 6 个，1 个 rank 时 12 个：每一步的批次不变
    try:
        model, optimizer = build()
        start = 0
        newest = newest_complete(args.checkpoint)  # 新的进程组运行的是同一条命令：所以每次都要找
        if newest is not None:
            model_state, optim_state = get_state_dict(model, optimizer)
            state = {"model": model_state, "optim": optim_state}
            dcp.load(state, checkpoint_id=newest)  # 动量也一起加载，并按当前的 world size 重新分片
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
            start = int(newest.name.split("-")[1])
        log(args.log_file, "start", rank=rank, attempt=attempt, world_size=world_size, step=start, samples=per_rank)
        for step in range(start, args.steps):
            inputs, targets = batch(step, GLOBAL_BATCH)
            mine = slice(rank * per_rank, (rank + 1) * per_rank)  # 这一步的批次中属于本 rank 的那一份
            optimizer.zero_grad()
            nn.functional.mse_loss(model(inputs[mine]), targets[mine]).backward()
            optimizer.step()
            model_state, optim_state = get_state_dict(model, optimizer)
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=args.checkpoint / f"step-{step + 1}")
            if rank == 0:
                log(args.log_file, "checkpoint", step=step + 1)
            time.sleep(args.step_delay)  # 真实的一步要花更长时间
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            torch.save(full, args.out)
            log(args.log_file, "done", rank=rank, step=args.steps)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
