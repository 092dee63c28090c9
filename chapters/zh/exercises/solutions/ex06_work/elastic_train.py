"""在代理进程启动的各个 rank 上用 FSDP2 + 带动量的 SGD 训练，每一步之后在 DIR/step-N 写一个 DCP 检查点。

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
    set_model_state_dict,
)
from torch.distributed.fsdp import fully_shard

PER_RANK = 6  # 每个 rank 每一步的样本数


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
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    try:
        model, optimizer = build()
        start = 0
        if args.resume:
            newest = sorted(args.checkpoint.glob("step-*"))[-1]
            state = {"model": get_model_state_dict(model)}
            dcp.load(state, checkpoint_id=newest)
            set_model_state_dict(model, state["model"])
            start = int(newest.name.split("-")[1])
        log(args.log_file, "start", rank=rank, attempt=attempt, world_size=world_size, step=start, samples=PER_RANK)
        for step in range(start, args.steps):
            inputs, targets = batch(step, PER_RANK * world_size)
            mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)  # 这一步的批次中属于本 rank 的那一份
            optimizer.zero_grad()
            nn.functional.mse_loss(model(inputs[mine]), targets[mine]).backward()
            optimizer.step()
            dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=args.checkpoint / f"step-{step + 1}")
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
