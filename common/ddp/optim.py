"""The optimizer and learning-rate schedule of ``common.ddp.train``, and rebuilding a schedule.

Introduced in chapters/04_2_ddp_training.ipynb.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from common.ddp.config import TrainConfig


def build_optimizer(config: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """AdamW (default) or SGD with momentum, as ``--optimizer`` says.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if config.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                               weight_decay=config.weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def build_scheduler(config: TrainConfig, optimizer: torch.optim.Optimizer,
                    total_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    """Cosine decay from ``--lr``, or a one-cycle warm-up to ``--lr`` and anneal, per step.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if config.schedule == "onecycle":
        # Warming up lets a short run use a high peak rate without diverging in its first steps.
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.lr, total_steps=total_steps,
                                                   pct_start=0.3)
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, total_steps)


def rebuild_scheduler(config: TrainConfig, optimizer: torch.optim.Optimizer, total_steps: int,
                      step: int) -> torch.optim.lr_scheduler.LRScheduler:
    """The schedule of a run planned for ``total_steps``, advanced to ``step``.

    For a run resumed with another ``--num-epochs``: the learning rate continues from where
    a run planned that long from the start would be at ``step``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    for group in optimizer.param_groups:
        group["lr"] = group.get("initial_lr", config.lr)
    scheduler = build_scheduler(config, optimizer, total_steps)
    with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": on purpose
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(step):
            scheduler.step()
    return scheduler
