"""Chapter 1's training loop with DistributedDataParallel: one process per core or GPU.

    torchrun --standalone --nproc_per_node=2 chapters/scripts/04_1/ddp.py --out runs/04_1/ddp
"""

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from common import CustomImageDataset, SmallCNN, V2EvalPreset, ensure_data


def build_loader(split: str, batch_size: int) -> DataLoader:
    data = ensure_data(verbose=False)
    dataset = CustomImageDataset(data.labels_csv(split), data.images_dir(split),
                                 V2EvalPreset(resize_size=32, crop_size=32))
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
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[int, int]:
    """(correct, seen) on ``loader``: counts, not a mean, so that they can be added up."""
    model.eval()  # BatchNorm uses its running statistics
    correct, seen = 0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        correct += (model(images).argmax(1) == labels).sum().item()
        seen += len(labels)
    return correct, seen


def train(args: argparse.Namespace, device: torch.device) -> None:
    torch.manual_seed(0)
    loader, val_loader = build_loader("train", args.batch_size), build_loader("val", 256)
    model = SmallCNN(num_classes=6).to(device)
    model = DDP(model, device_ids=[device] if device.type == "cuda" else None)  # averages gradients
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # warm up, then anneal to ~0 by the last step (Chapter 2.3's recipe)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.num_epochs * len(loader))
    loss_fn = nn.CrossEntropyLoss()
    log = {"steps": [], "epochs": [], "indices": []}
    for epoch in range(args.num_epochs):
        model.train()  # evaluate() left the model in evaluation mode
        loader.sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        log["indices"].append(list(loader.sampler))  # what this rank reads (checked below)
        loss_sum, correct, seen = 0.0, 0, 0
        asked = time.time()
        for images, labels in loader:
            got = time.time()
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            logits = model(images)
            loss = loss_fn(logits, labels)
            forward = time.time()
            loss.backward()
            backward = time.time()
            optimizer.step()
            scheduler.step()
            loss_sum += loss.item() * len(labels)
            correct += (logits.argmax(1) == labels).sum().item()
            seen += len(labels)
            log["steps"].append({"epoch": epoch, "asked": asked, "got": got, "forward": forward,
                                 "backward": backward, "done": time.time(), "loss": loss.item()})
            asked = time.time()
        val_correct, val_seen = evaluate(model, val_loader, device)
        log["epochs"].append({"loss": loss_sum / seen, "accuracy": correct / seen, "samples": seen,
                              "val_accuracy": val_correct / val_seen, "val_samples": val_seen})
        print(f"epoch {epoch}: loss {loss_sum / seen:.3f}, train accuracy {correct / seen:.3f}, "
              f"val accuracy {val_correct / val_seen:.3f} ({seen:.0f} + {val_seen:.0f} samples)")
    torch.save(model.state_dict(), args.out / "model.pt")
    log["weights"] = fingerprint(model)
    (args.out / "log_rank0.json").write_text(json.dumps(log))


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
