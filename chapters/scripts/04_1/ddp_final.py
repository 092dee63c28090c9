"""Chapter 1's training loop with DistributedDataParallel: one process per core or GPU.

    torchrun --standalone --nproc_per_node=2 chapters/scripts/04_1/ddp_final.py --out runs/04_1/final --cache data/cache --accum 2
"""

import argparse
import hashlib
import json
import os
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from common import SmallCNN
from common.fast import BatchNormalize, open_cache


def build_loader(split: str, batch_size: int, cache_root: Path) -> DataLoader:
    cache = open_cache(cache_root / f"{split}_32")  # uint8 crops, decoded once (Chapter 3)
    dataset = TensorDataset(torch.from_numpy(np.array(cache.images)), torch.from_numpy(cache.labels))
    if split == "train":
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)  # this rank's share, shuffled
    else:  # each validation image exactly once: no padding, no duplicates
        sampler = range(dist.get_rank(), len(dataset), dist.get_world_size())
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def fingerprint(model: nn.Module) -> str:
    """sha256 of all weights: equal fingerprints, equal weights."""
    return hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes()
                                   for p in model.parameters())).hexdigest()


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device,
             normalize: BatchNormalize) -> tuple[int, int]:
    """(correct, seen) on ``loader``: counts, not a mean, so that they can be added up."""
    model.eval()  # BatchNorm uses its running statistics
    correct, seen = 0, 0
    for images, labels in loader:
        images, labels = normalize(images.to(device)), labels.to(device)
        correct += (model(images).argmax(1) == labels).sum().item()
        seen += len(labels)
    return correct, seen


def train(args: argparse.Namespace, device: torch.device) -> None:
    torch.manual_seed(0)
    loader = build_loader("train", args.batch_size, args.cache)
    val_loader = build_loader("val", 256, args.cache)
    normalize = BatchNormalize()  # uint8 -> (x / 255 - mean) / std, once per batch
    model = SmallCNN(num_classes=6).to(device)
    model = DDP(model, device_ids=[device] if device.type == "cuda" else None)  # averages gradients
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # warm up, then anneal to ~0 by the last step (Chapter 2.3's recipe)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.num_epochs * (len(loader) // args.accum))
    loss_fn = nn.CrossEntropyLoss()
    log = {"steps": [], "epochs": [], "indices": []}
    for epoch in range(args.num_epochs):
        model.train()  # evaluate() left the model in evaluation mode
        loader.sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        log["indices"].append(list(loader.sampler))  # what this rank reads (checked below)
        loss_sum, correct, seen = 0.0, 0, 0
        asked = time.time()
        for i, (images, labels) in enumerate(loader):
            got = time.time()
            images, labels = normalize(images.to(device)), labels.to(device)  # normalize last
            sync = (i + 1) % args.accum == 0  # all-reduce on the last micro-batch of each step only
            with nullcontext() if sync else model.no_sync():
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
                    logits = model(images)  # convolutions and matmuls in bfloat16
                    loss = loss_fn(logits, labels)
                forward = time.time()
                (loss / args.accum).backward()  # gradients add up over the micro-batches
            backward = time.time()
            if sync:
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            loss_sum += loss.item() * len(labels)
            correct += (logits.argmax(1) == labels).sum().item()
            seen += len(labels)
            log["steps"].append({"epoch": epoch, "asked": asked, "got": got, "forward": forward,
                                 "backward": backward, "done": time.time(), "loss": loss.item(),
                                 "sync": sync})
            asked = time.time()
        val_correct, val_seen = evaluate(model, val_loader, device, normalize)
        totals = torch.tensor([loss_sum, correct, seen, val_correct, val_seen], dtype=torch.float64,
                              device=device)
        dist.all_reduce(totals)  # sums over all ranks; every rank receives them
        loss_sum, correct, seen, val_correct, val_seen = totals.tolist()
        log["epochs"].append({"loss": loss_sum / seen, "accuracy": correct / seen, "samples": seen,
                              "val_accuracy": val_correct / val_seen, "val_samples": val_seen})
        if dist.get_rank() == 0:  # one line per epoch, not one per rank
            print(f"epoch {epoch}: loss {loss_sum / seen:.3f}, train accuracy {correct / seen:.3f}, "
                  f"val accuracy {val_correct / val_seen:.3f} ({seen:.0f} + {val_seen:.0f} samples)")
    if dist.get_rank() == 0:  # one copy, written once
        torch.save(model.module.state_dict(), args.out / "model.pt")
    log["weights"] = fingerprint(model)
    (args.out / f"log_rank{dist.get_rank()}.json").write_text(json.dumps(log))


def pick_device(local_rank: int, local_world_size: int) -> tuple[torch.device, str]:
    """A GPU of its own if this machine has one per local rank, else the CPU; and why."""
    gpus = torch.cuda.device_count()  # the GPUs this process can see
    if os.environ.get("COMPANION_DEVICE") == "cpu":  # inherited by every worker
        return torch.device("cpu"), "COMPANION_DEVICE=cpu"
    if gpus >= local_world_size:
        return torch.device(f"cuda:{local_rank}"), f"{gpus} GPU(s) for {local_world_size} rank(s) here"
    mac = "; MPS has no DDP backend" if torch.backends.mps.is_available() else ""
    return torch.device("cpu"), f"{gpus} GPU(s) for {local_world_size} rank(s) here{mac}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the model and logs")
    parser.add_argument("--num-epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--amp", action="store_true", help="bfloat16 autocast (for GPUs)")
    parser.add_argument("--cache", type=Path, required=True,
                        help="folder with the train_32 and val_32 uint8 caches (Chapter 3)")
    parser.add_argument("--lr", type=float, default=8e-3, help="peak learning rate")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # one core per process: the processes share this machine's cores
    local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun, with RANK, WORLD_SIZE, ...
    device, why = pick_device(local_rank, int(os.environ["LOCAL_WORLD_SIZE"]))
    backend = "nccl" if device.type == "cuda" else "gloo"
    if int(os.environ["RANK"]) == 0:  # one line for the whole job
        print(f"{device.type} + {backend}: {why}", flush=True)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init_process_group: this rank owns this GPU
    dist.init_process_group(backend)
    try:
        train(args, device)
    finally:
        dist.destroy_process_group()  # on every way out, errors included


if __name__ == "__main__":
    main()
