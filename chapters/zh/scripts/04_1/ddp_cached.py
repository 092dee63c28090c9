"""第 1 章的训练循环，用 DistributedDataParallel 改写：每个核心或每块 GPU 一个进程。

    torchrun --standalone --nproc_per_node=2 chapters/scripts/04_1/ddp_cached.py --out runs/04_1/cached2 --cache data/cache
"""

import argparse
import hashlib
import json
import os
import time
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
    cache = open_cache(cache_root / f"{split}_32")  # uint8 裁剪图，只解码一次（第 3 章）
    dataset = TensorDataset(torch.from_numpy(np.array(cache.images)), torch.from_numpy(cache.labels))
    if split == "train":
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)  # 本 rank 的那一份，已打乱
    else:  # 每张验证图片恰好一次：不填充，不重复
        sampler = range(dist.get_rank(), len(dataset), dist.get_world_size())
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def fingerprint(model: nn.Module) -> str:
    """所有权重的 sha256：指纹相同，权重就相同。"""
    return hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes()
                                   for p in model.parameters())).hexdigest()


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device,
             normalize: BatchNormalize) -> tuple[int, int]:
    """在 ``loader`` 上的 (correct, seen)：返回计数而不是平均值，这样才能把它们加起来。"""
    model.eval()  # BatchNorm 使用其滑动平均统计量
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
    normalize = BatchNormalize()  # uint8 -> (x / 255 - mean) / std，每个批次做一次
    model = SmallCNN(num_classes=6).to(device)
    model = DDP(model, device_ids=[device] if device.type == "cuda" else None)  # 对梯度取平均
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # 先预热，到最后一步退火到接近 0（第 2.3 章的做法）
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.num_epochs * len(loader))
    loss_fn = nn.CrossEntropyLoss()
    log = {"steps": [], "epochs": [], "indices": []}
    for epoch in range(args.num_epochs):
        model.train()  # evaluate() 把模型留在了评估模式
        loader.sampler.set_epoch(epoch)  # 每个轮次重新打乱，各 rank 的顺序相同
        log["indices"].append(list(loader.sampler))  # 本 rank 读取的样本（下面会检查）
        loss_sum, correct, seen = 0.0, 0, 0
        asked = time.time()
        for images, labels in loader:
            got = time.time()
            images, labels = normalize(images.to(device)), labels.to(device)  # 最后再归一化
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
        val_correct, val_seen = evaluate(model, val_loader, device, normalize)
        totals = torch.tensor([loss_sum, correct, seen, val_correct, val_seen], dtype=torch.float64,
                              device=device)
        dist.all_reduce(totals)  # 对所有 rank 求和；每个 rank 都得到结果
        loss_sum, correct, seen, val_correct, val_seen = totals.tolist()
        log["epochs"].append({"loss": loss_sum / seen, "accuracy": correct / seen, "samples": seen,
                              "val_accuracy": val_correct / val_seen, "val_samples": val_seen})
        if dist.get_rank() == 0:  # 每个轮次一行，而不是每个 rank 一行
            print(f"epoch {epoch}: loss {loss_sum / seen:.3f}, train accuracy {correct / seen:.3f}, "
                  f"val accuracy {val_correct / val_seen:.3f} ({seen:.0f} + {val_seen:.0f} samples)")
    if dist.get_rank() == 0:  # 只保存一份，只写一次
        torch.save(model.module.state_dict(), args.out / "model.pt")
    log["weights"] = fingerprint(model)
    (args.out / f"log_rank{dist.get_rank()}.json").write_text(json.dumps(log))


def pick_device(local_rank: int, local_world_size: int) -> tuple[torch.device, str]:
    """如果这台机器为每个 local rank 都备有一块 GPU，就用自己的那块，否则用 CPU；并给出原因。"""
    gpus = torch.cuda.device_count()  # 本进程能看到的 GPU
    if os.environ.get("COMPANION_DEVICE") == "cpu":  # 每个工作进程都会继承
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
    parser.add_argument("--cache", type=Path, required=True,
                        help="folder with the train_32 and val_32 uint8 caches (Chapter 3)")
    parser.add_argument("--lr", type=float, default=8e-3, help="peak learning rate")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # 每个进程一个核心：各进程共用这台机器的核心
    local_rank = int(os.environ["LOCAL_RANK"])  # 由 torchrun 设置，和 RANK、WORLD_SIZE 等一样
    device, why = pick_device(local_rank, int(os.environ["LOCAL_WORLD_SIZE"]))
    backend = "nccl" if device.type == "cuda" else "gloo"
    if int(os.environ["RANK"]) == 0:  # 整个作业只打印一行
        print(f"{device.type} + {backend}: {why}", flush=True)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # 在 init_process_group 之前：这块 GPU 归本 rank 使用
    dist.init_process_group(backend)
    try:
        train(args, device)
    finally:
        dist.destroy_process_group()  # 无论以何种方式退出都会执行，出错时也一样


if __name__ == "__main__":
    main()
