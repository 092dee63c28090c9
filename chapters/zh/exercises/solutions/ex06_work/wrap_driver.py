"""在 N 个 rank 上对几个模型调用 wrapping.shard；rank 0 把结果写到 OUT（JSON + .pt）。

    torchrun --standalone --nproc_per_node=N wrap_driver.py --out OUT
"""

import argparse
import json
import runpy
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

#: 学习者的 wrapping.py，就在本脚本旁边。
shard = runpy.run_path(str(Path(__file__).resolve().with_name("wrapping.py")))["shard"]


def build(kind: str) -> nn.Module:
    torch.manual_seed(0)
    if kind == "nested":
        inner = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), inner, nn.Linear(16, 4))
    return nn.Sequential(nn.Linear(8, 7), nn.ReLU(), nn.Linear(7, 4))  # "odd"：2 个 rank 分 7 行


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)  # 每个 rank 上是同一个批次
    return torch.randn(12, 8, generator=generator), torch.randn(12, 4, generator=generator)


def run(kind: str, min_params: int) -> tuple[dict, dict]:
    model = build(kind)
    units = shard(model, min_params=min_params)
    params = {}
    for name, p in model.named_parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        shapes = [None] * dist.get_world_size()
        dist.all_gather_object(shapes, list(local.shape))
        params[name] = {"type": type(p).__name__, "shapes": shapes,
                        "placements": [repr(x) for x in p.placements] if isinstance(p, DTensor) else None}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = batch()
    for _ in range(2):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    fsdp = [name for name, m in model.named_modules() if isinstance(m, FSDPModule)]
    return {"units": list(units), "fsdp_modules": fsdp, "params": params}, full


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        reports, weights = {}, {}
        for kind, min_params in (("nested", 200), ("nested", 500), ("nested", 144), ("nested", 10_000),
                                 ("odd", 40)):
            key = f"{kind}/{min_params}"
            try:
                reports[key], weights[key] = run(kind, min_params)
            except Exception as error:  # 先用一行说明哪里失败了，然后是 torchrun 的报告
                print(f"rank {dist.get_rank()}: {key}: {type(error).__name__}: {error}", flush=True)
                raise
        if dist.get_rank() == 0:
            args.out.with_suffix(".json").write_text(json.dumps(reports, indent=1))
            torch.save(weights, args.out.with_suffix(".pt"))
            print(f"rank 0: {len(reports)} models wrapped and trained on {dist.get_world_size()} ranks")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
