"""在 N 个 rank 上，用 ImageFolder 的验证集评估一个保存好的分类器。

    torchrun --standalone --nproc_per_node=N evaluate.py --data ROOT --model MODEL.pt
"""

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class FolderImages(Dataset):
    """把 ROOT/<class>/<file>.png 读成 (pixels, label)：灰度值展平，取值 0..1。"""

    def __init__(self, root: Path, classes: list[str]) -> None:
        self.samples = [(path, label) for label, name in enumerate(classes)
                        for path in sorted((root / name).glob("*.png"))]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, label = self.samples[index]
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("L"), dtype=np.float32).reshape(-1) / 255
        return torch.from_numpy(pixels), label


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        state = torch.load(args.model, weights_only=True)
        model = nn.Linear(state["weight"].shape[1], state["weight"].shape[0])
        model.load_state_dict(state)
        classes = sorted(entry.name for entry in (args.data / "val").iterdir() if entry.is_dir())
        dataset = FolderImages(args.data / "val", classes)
        sampler = DistributedSampler(dataset, shuffle=False)
        loader = DataLoader(dataset, batch_size=4, sampler=sampler, drop_last=True)
        correct = seen = 0
        with torch.no_grad():
            for pixels, labels in loader:
                correct += (model(pixels).argmax(1) == labels).sum().item()
                seen += len(labels)
        print(f"rank {rank}: {seen} images")
        totals = torch.tensor([correct, seen])
        dist.all_reduce(totals)
        correct, seen = totals.tolist()
        if rank == 0:
            print(f"classes: {', '.join(classes)}; model outputs: {model.out_features}")
            print(f"val: {seen} images, {correct} correct, accuracy {correct / seen:.3f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
