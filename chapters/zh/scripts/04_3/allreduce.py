"""在 torchrun 启动的所有 rank 上做一次全归约，超时设得很短（第 4.3 章）。

每个 rank 贡献自己的 rank + 1，每个 rank 打印的和都必须相同。
连不上的进程组会在 --timeout 秒内失败，而不是等 torch 默认的 30 分钟。
"""

import argparse
import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--timeout", type=float, default=10, help="seconds for the group to connect")
args = parser.parse_args()

dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
rank = dist.get_rank()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
print(f"rank {rank} on {socket.gethostname()} (local rank {os.environ['LOCAL_RANK']}): "
      f"sum {total.item():g} over {dist.get_world_size()} ranks", flush=True)
dist.destroy_process_group()
