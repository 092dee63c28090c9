"""把第 1 章的训练循环写成脚本，数据来自第 2 章的管道：只用一个进程。

    python chapters/scripts/04_1/single.py --out runs/04_1/single
"""

import argparse
import hashlib
import json
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

from common import CustomImageDataset, SmallCNN, V2EvalPreset, ensure_data


def build_loader(split: str, batch_size: int) -> DataLoader:
    data = ensure_data(verbose=False)
    dataset = CustomImageDataset(data.labels_csv(split), data.images_dir(split),
                                 V2EvalPreset(resize_size=32, crop_size=32))
    return DataLoader(dataset, batch_size=batch_size, shuffle=split == "train")


def fingerprint(model: nn.Module) -> str:
    """所有权重的 sha256：指纹相同，权重就相同。"""
    return hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes()
                                   for p in model.parameters())).hexdigest()


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[int, int]:
    """在 ``loader`` 上的 (correct, seen)：返回计数而不是平均值，这样才能把它们加起来。"""
    model.eval()  # BatchNorm 使用其滑动平均统计量
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
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # 先预热，到最后一步退火到接近 0（第 2.3 章的做法）
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.num_epochs * len(loader))
    loss_fn = nn.CrossEntropyLoss()
    log = {"steps": [], "epochs": []}
    for epoch in range(args.num_epochs):
        model.train()  # evaluate() 把模型留在了评估模式
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the model and logs")
    parser.add_argument("--num-epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=8e-3, help="peak learning rate")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # 每个进程一个核心：各进程共用这台机器的核心
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train(args, device)


if __name__ == "__main__":
    main()
