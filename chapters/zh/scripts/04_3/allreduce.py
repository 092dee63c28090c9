"""One all-reduce across every rank torchrun started, with a short timeout (chapter 4.3).

Each rank adds its rank + 1; every rank must print the same sum. A group that cannot connect
fails within --timeout seconds instead of torch's default 30 minutes.
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
