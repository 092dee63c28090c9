"""A plain training loop: ``train_one_epoch``, ``evaluate`` and ``fit`` with progress bars."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm.auto import tqdm


@dataclass
class History:
    """Per-epoch metrics of a run; ``plotting.plot_history`` draws it.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """

    train_loss: list[float] = field(default_factory=list)
    train_acc: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_acc: list[float] = field(default_factory=list)


def train_one_epoch(model: nn.Module, loader: Iterable, optimizer: torch.optim.Optimizer,
                    device: torch.device, *, loss_fn: nn.Module | None = None,
                    progress: bool = True, desc: str = "train") -> tuple[float, float]:
    """One pass over ``loader`` with gradient steps; returns (mean loss, accuracy).

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    model.train()
    total_loss, correct, seen = 0.0, 0, 0
    bar = tqdm(loader, desc=desc, leave=False, disable=not progress)
    for images, labels in bar:
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        logits = model(images)
        loss = loss_fn(logits, labels)
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * labels.size(0)
        correct += (logits.argmax(dim=1) == labels).sum().item()
        seen += labels.size(0)
        bar.set_postfix(loss=f"{total_loss / seen:.3f}")
    if seen == 0:
        raise ValueError("the training loader yielded no samples")
    return total_loss / seen, correct / seen


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable, device: torch.device, *,
             loss_fn: nn.Module | None = None) -> tuple[float, float]:
    """Mean loss and accuracy over ``loader`` without gradients.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        logits = model(images)
        total_loss += loss_fn(logits, labels).item() * labels.size(0)
        correct += (logits.argmax(dim=1) == labels).sum().item()
        seen += labels.size(0)
    if seen == 0:
        raise ValueError("the evaluation loader yielded no samples")
    return total_loss / seen, correct / seen


def fit(model: nn.Module, train_loader: Iterable, val_loader: Iterable, *,
        optimizer: torch.optim.Optimizer, num_epochs: int, device: torch.device,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        progress: bool = True) -> History:
    """Train for ``num_epochs`` and evaluate after each; returns the ``History``.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    history = History()
    epochs = tqdm(range(1, num_epochs + 1), desc="epochs", disable=not progress)
    for epoch in epochs:
        train_loss, train_acc = train_one_epoch(model, train_loader, optimizer, device,
                                                progress=progress, desc=f"epoch {epoch}")
        val_loss, val_acc = evaluate(model, val_loader, device)
        if scheduler is not None:
            scheduler.step()
        history.train_loss.append(train_loss)
        history.train_acc.append(train_acc)
        history.val_loss.append(val_loss)
        history.val_acc.append(val_acc)
        epochs.set_postfix(train_loss=f"{train_loss:.3f}", val_acc=f"{val_acc:.3f}")
    return history
