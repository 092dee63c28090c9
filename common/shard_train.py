"""Train ``SmallCNN`` from tar shards with DDP; every rank streams its own shards.

One process, then two (CPU: gloo; CUDA: nccl, one GPU per rank)::

    python -m common.shard_train --shards data/shards/train --val-shards data/shards/val
    torchrun --standalone --nproc_per_node=2 -m common.shard_train \\
        --shards data/shards/train --val-shards data/shards/val --out runs/shards.json
    torchrun --standalone --nproc_per_node=2 -m common.shard_train --tiny ...  # tests

Make the shards first with ``python data_scripts/make_shards.py``. Rank 0 prints the
batches every rank ran in each epoch (they must be equal, or DDP would hang) and
evaluates on the validation shards.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from common.distributed import (
    DistInfo,
    all_reduce_sum,
    cleanup_distributed,
    is_main_process,
    setup_distributed,
)
from common.models import SmallCNN
from common.shards import ShardedImageDataset
from common.training import evaluate, train_one_epoch
from common.transforms import V2EvalPreset, V2TrainPreset


@dataclass
class ShardTrainConfig:
    """Options of one run (``--tiny`` shrinks them for tests).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    shards: str = "data/shards/train"
    val_shards: str = "data/shards/val"
    num_classes: int = 6
    image_size: int = 64
    batch_size: int = 32
    num_epochs: int = 3
    lr: float = 3e-3
    augment: bool = True
    num_workers: int = 0
    buffer_size: int = 256
    equalize: str = "pad"
    seed: int = 0
    out: str = ""


TINY = {"image_size": 32, "batch_size": 4, "num_epochs": 2, "buffer_size": 8}


class CountingLoader:
    """Wrap a loader and count the batches it yields (to show equal counts per rank).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    def __init__(self, loader: DataLoader) -> None:
        self.loader, self.batches, self.samples = loader, 0, 0

    def __iter__(self):
        self.batches = self.samples = 0
        for images, labels in self.loader:
            self.batches += 1
            self.samples += len(labels)
            yield images, labels


def build_loaders(config: ShardTrainConfig, info: DistInfo) -> tuple[DataLoader, DataLoader]:
    """The train loader over this rank's shards, and the validation loader (all shards)."""
    size = config.image_size
    train_tf = (V2TrainPreset(crop_size=size, scale=(0.6, 1.0)) if config.augment
                else V2EvalPreset(resize_size=size, crop_size=size))
    train_set = ShardedImageDataset(
        config.shards, train_tf,
        buffer_size=config.buffer_size, seed=config.seed, rank=info.rank,
        world_size=info.world_size, equalize=config.equalize)
    val_set = ShardedImageDataset(
        config.val_shards, V2EvalPreset(resize_size=size, crop_size=size),
        shuffle=False, rank=0, world_size=1, equalize="none")
    pin = info.device.type == "cuda"
    return (DataLoader(train_set, batch_size=config.batch_size, num_workers=config.num_workers,
                       pin_memory=pin),
            DataLoader(val_set, batch_size=2 * config.batch_size, pin_memory=pin))


def build_model(config: ShardTrainConfig, info: DistInfo) -> torch.nn.Module:
    """``SmallCNN`` on this rank's device, wrapped in DDP when a process group exists."""
    model = SmallCNN(num_classes=config.num_classes).to(info.device)
    if info.initialized:
        return DistributedDataParallel(model, device_ids=[info.device] if info.device.type
                                       == "cuda" else None)
    return model


def run_epoch(model, loader: CountingLoader, optimizer, info: DistInfo) -> dict:
    """Train one epoch; returns what every rank did (gathered with ``all_reduce_sum``)."""
    start = time.perf_counter()
    loss, acc = train_one_epoch(model, loader, optimizer, info.device, progress=False)
    counts = torch.zeros(2, info.world_size, dtype=torch.int64, device=info.device)
    counts[:, info.rank] = torch.tensor([loader.batches, loader.samples])
    counts = all_reduce_sum(counts).cpu()
    return {"batches_per_rank": counts[0].tolist(), "samples_per_rank": counts[1].tolist(),
            "train_loss": loss, "train_acc": acc, "seconds": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in fields(ShardTrainConfig):
        flag = f"--{field.name.replace('_', '-')}"
        if isinstance(field.default, bool):  # --augment / --no-augment
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default)
        else:
            parser.add_argument(flag, type=type(field.default), default=field.default)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes for tests")
    args = vars(parser.parse_args(argv))
    tiny = TINY if args.pop("tiny") else {}
    config = ShardTrainConfig(**{**args, **tiny})
    torch.manual_seed(config.seed)  # the same initial weights on every rank
    info = setup_distributed()
    history = []
    try:
        train_loader, val_loader = build_loaders(config, info)
        model = build_model(config, info)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        counted = CountingLoader(train_loader)
        for epoch in range(config.num_epochs):
            train_loader.dataset.set_epoch(epoch)
            record = {"epoch": epoch, **run_epoch(model, counted, optimizer, info)}
            if is_main_process():
                plain = model.module if info.initialized else model
                record["val_loss"], record["val_acc"] = evaluate(plain, val_loader, info.device)
                print(f"epoch {epoch}: batches per rank {record['batches_per_rank']}, samples "
                      f"per rank {record['samples_per_rank']}, train loss "
                      f"{record['train_loss']:.3f}, val acc {record['val_acc']:.3f} "
                      f"({record['seconds']:.1f} s)", flush=True)
            history.append(record)
        if is_main_process() and config.out:
            Path(config.out).parent.mkdir(parents=True, exist_ok=True)
            Path(config.out).write_text(json.dumps({"world_size": info.world_size,
                                                    "config": asdict(config),
                                                    "epochs": history}, indent=2))
    finally:
        cleanup_distributed()
    return history


if __name__ == "__main__":
    main()
