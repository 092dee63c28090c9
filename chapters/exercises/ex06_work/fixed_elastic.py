raise NotImplementedError("fix this script, then delete this line")  # YOUR CODE HERE: the answer file of an exercise
"""FSDP2 + SGD with momentum on the ranks its agents start, a DCP checkpoint after every step in DIR/step-N.

    torchrun --nnodes=1:2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT --max-restarts=1
        elastic_train.py --checkpoint DIR --out FILE --log-file LOG [--steps 12] [--step-delay S] [--resume]

JSON lines in LOG: every rank {"event": "start", "rank", "attempt", "world_size", "step", "samples"} when its
group starts training at "step" ("samples": the samples it trains on per step); rank 0 {"event": "checkpoint",
"step"} after each checkpoint, and {"event": "done", "rank", "step"} once it has written the final weights to FILE.
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

PER_RANK = 6  # samples per rank and step


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batch(step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)  # step N's batch, the same on every rank
    return torch.randn(size, 8, generator=generator), torch.randn(size, 4, generator=generator)


def log(path: Path, event: str, **values) -> None:
    with path.open("a") as file:  # one short line per write: the ranks' lines do not mix
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
            mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)  # this rank's share of the step's batch
            optimizer.zero_grad()
            nn.functional.mse_loss(model(inputs[mine]), targets[mine]).backward()
            optimizer.step()
            dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=args.checkpoint / f"step-{step + 1}")
            if rank == 0:
                log(args.log_file, "checkpoint", step=step + 1)
            time.sleep(args.step_delay)  # a real step takes longer
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            torch.save(full, args.out)
            log(args.log_file, "done", rank=rank, step=args.steps)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
