"""Plots the chapters show: image grids and training curves."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from common.training import History


def unnormalize(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Undo ``Normalize(mean, std)`` on a (C, H, W) or (N, C, H, W) tensor.

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """
    mean_t = torch.as_tensor(mean, dtype=images.dtype).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=images.dtype).view(-1, 1, 1)
    return images * std_t + mean_t


def _to_hwc(image) -> object:
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu()
        if image.dtype == torch.uint8:
            image = image.float() / 255
        return image.clamp(0, 1).permute(1, 2, 0).numpy()
    return image


def show_images(images: Sequence, titles: Sequence[str] | None = None, *, ncols: int = 8,
                size: float = 1.6, suptitle: str | None = None) -> Figure:
    """A grid of PIL images or (C, H, W) tensors in [0, 1] (or uint8), with optional titles.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    if len(images) == 0:
        raise ValueError("show_images needs at least one image")
    ncols = min(ncols, len(images))
    nrows = (len(images) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols, size * nrows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for i, image in enumerate(images):
        ax = axes.flat[i]
        ax.imshow(_to_hwc(image))
        if titles is not None:
            ax.set_title(titles[i], fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def plot_history(history: History, *, title: str | None = None) -> Figure:
    """Loss and accuracy per epoch, train and validation, side by side.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    epochs = range(1, len(history.train_loss) + 1)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.2))
    ax_loss.plot(epochs, history.train_loss, "o-", label="train")
    ax_loss.plot(epochs, history.val_loss, "s-", label="val")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy loss")
    ax_acc.plot(epochs, history.train_acc, "o-", label="train")
    ax_acc.plot(epochs, history.val_acc, "s-", label="val")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", ylim=(0, 1.02))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
