"""pytorch/examples' ``imagenet/main.py`` launched as ``torchrun`` runs it, up to its first steps.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m common.ddp.examples_main \\
        DIR --image-size 32 -b 32 --max-steps 1 -j 0

What a user would run instead of ``common.ddp.train`` (pytorch/examples at commit
``77f55b9``, ``imagenet/main.py``), kept as it is where it costs start-up time: the same
imports (``torchvision.models``, ``datasets``, ``transforms``; the model names listed at
import), ``init_process_group`` from torchrun's environment (``--dist-url env://``, the
``gloo`` backend on a CPU), the model built by name (``resnet18`` with its 1,000 classes), SGD
with momentum and weight decay and ``StepLR``, the training ``ImageFolder`` with
``RandomResizedCrop`` + ``RandomHorizontalFlip`` + ``ToTensor`` + ``Normalize``, the
validation ``ImageFolder`` with ``Resize`` + ``CenterCrop``, a ``DistributedSampler`` for
each, ``DataLoader(..., pin_memory=True)``, and its training loop (forward, loss, top-1/top-5
accuracy, ``zero_grad``, ``backward``, ``step``). ``-b`` is the batch of each process, as in
examples when no GPU divides it.

Changed, so that it does the work ``common.ddp.train`` does and says when: the model is
wrapped in ``DistributedDataParallel`` on the CPU too (examples leaves it unwrapped there,
``"using CPU, this will be slow"``, so its ranks train two independent models);
the CPU is used even where an accelerator is found (the
trainer is compared there); ``--image-size`` replaces the fixed 224 (and 256 for the validation resize, kept at that
ratio); ``--max-steps`` stops the loop; rank 0 prints a JSON line ``{"event": "first_step",
"time": ..., "cpu_s": ...}`` (``time.time()``, as ``common.ddp.run_log.RunLog``, and the
process's CPU seconds, as ``common.ddp.train`` logs them) when its first optimizer step has
returned. No validation, checkpoint, progress meter or ``--resume`` runs before that.
``python -m common.ddp.first_step`` times it beside ``common.ddp.train``.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.parallel
import torch.optim
import torch.utils.data
import torch.utils.data.distributed
import torchvision.datasets as datasets
import torchvision.models as models
import torchvision.transforms as transforms
from torch.optim.lr_scheduler import StepLR

model_names = sorted(name for name in models.__dict__
                     if name.islower() and not name.startswith("__")
                     and callable(models.__dict__[name]))


def parser() -> argparse.ArgumentParser:
    """examples' flags that matter before the first step, and ``--image-size``, ``--max-steps``.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    found = argparse.ArgumentParser(description="pytorch/examples imagenet/main.py's DDP launch, "
                                                "to its first optimizer steps")
    found.add_argument("data", metavar="DIR", help="an ImageFolder root (train/ and val/)")
    found.add_argument("-a", "--arch", default="resnet18", choices=model_names)
    found.add_argument("-j", "--workers", default=4, type=int, help="DataLoader workers")
    found.add_argument("-b", "--batch-size", default=256, type=int, help="batch of each process")
    found.add_argument("--lr", default=0.1, type=float)
    found.add_argument("--momentum", default=0.9, type=float)
    found.add_argument("--wd", "--weight-decay", default=1e-4, type=float, dest="weight_decay")
    found.add_argument("--dist-backend", default="gloo", help="examples' default is nccl (GPUs)")
    found.add_argument("--seed", default=None, type=int)
    found.add_argument("--image-size", default=224, type=int, help="side of the training crops")
    found.add_argument("--max-steps", default=1, type=int, help="optimizer steps, then stop")
    return found


def accuracy(output: torch.Tensor, target: torch.Tensor, topk=(1,)) -> list[torch.Tensor]:
    """examples' top-k accuracy, in percent.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    with torch.no_grad():
        maxk = min(max(topk), output.size(1))
        _, pred = output.topk(maxk, 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [correct[:min(k, maxk)].reshape(-1).float().sum(0, keepdim=True)
                .mul_(100.0 / target.size(0)) for k in topk]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.ddp.examples_main`` (under torchrun).

    Introduced in docs/scripts.md ("Time to the first step").
    """
    args = parser().parse_args(argv)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    accelerator = torch.accelerator.is_available()  # examples asks in main() and main_worker()
    print(f"Using device: cpu (an accelerator: {accelerator}; the CPU either way, as the trainer "
          "is compared there)")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world_size > 1:
        dist.init_process_group(backend=args.dist_backend, init_method="env://",
                                world_size=world_size, rank=rank)
    print(f"=> creating model '{args.arch}'")
    model = models.__dict__[args.arch]()
    if world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)
    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    size = args.image_size
    train_dataset = datasets.ImageFolder(os.path.join(args.data, "train"), transforms.Compose([
        transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), normalize]))
    val_dataset = datasets.ImageFolder(os.path.join(args.data, "val"), transforms.Compose([
        transforms.Resize(size * 256 // 224), transforms.CenterCrop(size),
        transforms.ToTensor(), normalize]))
    distributed = world_size > 1
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset) \
        if distributed else None
    val_sampler = torch.utils.data.distributed.DistributedSampler(
        val_dataset, shuffle=False, drop_last=True) if distributed else None
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=(train_sampler is None),
        num_workers=args.workers, pin_memory=True, sampler=train_sampler)
    torch.utils.data.DataLoader(val_dataset, batch_size=args.batch_size, shuffle=False,
                                num_workers=args.workers, pin_memory=True, sampler=val_sampler)
    if train_sampler is not None:
        train_sampler.set_epoch(0)
    model.train()
    for step, (images, target) in enumerate(train_loader, start=1):
        output = model(images)
        loss = criterion(output, target)
        accuracy(output, target, topk=(1, 5))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 1 and rank == 0:
            print(json.dumps({"event": "first_step", "time": round(time.time(), 3),
                              "cpu_s": round(time.process_time(), 3)}), flush=True)
        if step >= args.max_steps:
            break
    scheduler.step()
    if distributed:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
