import json
import os
import sys

import torch
import torch.distributed as dist
from fsdp_script import build_model  # seed 0, 4 blocks and a head, as above
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import fully_shard


def sharded_on_meta() -> nn.Module:
    with torch.device("meta"):
        model = build_model()  # shapes only: no memory, no values
    for block in model[:-1]:
        fully_shard(block)
    fully_shard(model)            # cut into Shard(0) pieces from the shapes alone
    model.to_empty(device="cpu")  # this rank's shards, allocated, uninitialised
    return model


def accumulate(model: nn.Module, micro_batches: list) -> bool:
    """Backward on each micro-batch, reduce-scatter after the last; True if no sharded
    gradient existed before the last one."""
    for index, (x, y) in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        model.set_requires_gradient_sync(last)  # False: keep the unsharded gradient here
        untouched = all(p.grad is None for p in model.parameters())
        (nn.functional.cross_entropy(model(x), y) / len(micro_batches)).backward()
    return untouched


def farthest(sharded, plain) -> float:
    return max((s.full_tensor() - p).abs().max().item() for s, p in zip(sharded, plain, strict=True))


def main() -> None:
    out = sys.argv[1]  # the folder for the reports
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    reference = build_model()  # what one process trains: unsharded
    model = sharded_on_meta()
    for module in model.modules():  # a fresh start: each layer initialises its own shards
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    weight = model[0][0].weight.full_tensor()
    report = {"rank": rank, "reset: rows 0-31 == rows 32-63": torch.equal(weight[:32], weight[32:])}
    full = reference.state_dict() if rank == 0 else {}  # only rank 0 holds the full state dict
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True,
                                                               broadcast_from_rank0=True))
    report["loaded: max |w - one process|"] = farthest(model.parameters(), reference.parameters())
    gen = torch.Generator().manual_seed(1)
    images, labels = torch.randn(16, 64, generator=gen), torch.randint(0, 6, (16,), generator=gen)
    nn.functional.cross_entropy(reference(images), labels).backward()  # one batch of 16
    x, y = images.chunk(world_size)[rank], labels.chunk(world_size)[rank]  # this rank's 8
    micro_batches = list(zip(x.chunk(2), y.chunk(2), strict=True))  # 2 of 4
    report["no sharded grad until the last"] = accumulate(model, micro_batches)
    grads, plain = [p.grad for p in model.parameters()], [p.grad for p in reference.parameters()]
    report["accumulated: max |g - one batch|"] = farthest(grads, plain)
    local = torch.stack([torch.linalg.vector_norm(g.to_local()) for g in grads])
    report["norm of the local shards"] = torch.linalg.vector_norm(local).item()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.1)  # a DTensor
    report["clip_grad_norm_: total norm"] = total.full_tensor().item()
    one_process = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=0.1)
    report["one process: total norm"] = one_process.item()
    report["clipped: max |g - one process|"] = farthest(grads, plain)
    with open(os.path.join(out, f"idioms_rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
