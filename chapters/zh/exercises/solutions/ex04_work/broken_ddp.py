"""一个有三个错误的 DDP 训练脚本。

    torchrun --standalone --nproc_per_node=2 broken_ddp.py --out FOLDER
"""

import argparse
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        torch.manual_seed(0)
        features = torch.randn(64, 4)
        dataset = TensorDataset(features, (features.sum(1) > 0).long(), torch.arange(64))
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        model = DDP(nn.Linear(4, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        for epoch in range(3):
            correct, seen, first = 0, 0, None
            for inputs, labels, indices in loader:
                first = indices.tolist() if first is None else first
                optimizer.zero_grad()
                logits = model(inputs)
                nn.functional.cross_entropy(logits, labels).backward()
                optimizer.step()
                correct += (logits.argmax(1) == labels).sum().item()
                seen += len(labels)
            if rank == 0:
                print(f"epoch {epoch}: {seen} samples, accuracy {correct / seen:.2f}, first indices {first}")
        torch.save(model.module.state_dict(), args.out / "model.pt")
        print(f"rank {rank}: saved model.pt")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
