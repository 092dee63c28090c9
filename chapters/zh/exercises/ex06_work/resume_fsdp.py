"""用 FSDP2 在 N 个 rank 上训练一个小模型，保存检查点，再从检查点继续训练。

    torchrun --standalone --nproc_per_node=N resume_fsdp.py --checkpoint DIR --out FILE [--resume]

写出 DIR/step-3（从 DIR/step-3 恢复时再写 DIR/step-6），最终权重写到 FILE。
"""

import argparse
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)  # 每个 rank 上是同一个批次
    return torch.randn(12, 8, generator=generator), torch.randn(12, 4, generator=generator)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        model = build_model()
        for layer in (model[0], model[2]):
            fully_shard(layer)
        fully_shard(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        first = 0
        if args.resume:
            model.load_state_dict(torch.load(args.checkpoint / "step-3" / f"rank{rank}.pt", weights_only=False))
            first = 3
        inputs, targets = batch()
        for _ in range(3):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
        saved = args.checkpoint / f"step-{first + 3}"
        saved.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), saved / f"rank{rank}.pt")
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        torch.save(full, args.out)
        print(f"rank {rank}: step {first + 3}, loss {loss.item():.4f}, saved {saved.name} and {args.out.name}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
