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


def plot_channel_histograms(groups: dict[str, torch.Tensor], *, bins: int = 60,
                            channel_names: Sequence[str] = ("R", "G", "B")) -> Figure:
    """One histogram panel per group of images, one curve per channel.

    Args:
        groups: Panel title -> images (N, C, H, W) or (C, H, W), e.g. before/after Normalize.
        bins: Histogram bins.
        channel_names: Legend labels (and colours, for R, G, B).

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3), squeeze=False)
    colours = ("tab:red", "tab:green", "tab:blue")
    for ax, (title, images) in zip(axes.flat, groups.items(), strict=True):
        images = images.unsqueeze(0) if images.dim() == 3 else images
        for c, name in enumerate(channel_names):
            values = images[:, c].flatten().float().numpy()
            ax.hist(values, bins=bins, histtype="step", color=colours[c % 3], label=name)
        ax.set(title=title, xlabel="pixel value", ylabel="count")
        ax.legend()
    fig.tight_layout()
    return fig


def plot_class_counts(counts: dict[str, Sequence[int]], classes: Sequence[str]) -> Figure:
    """Grouped bars: samples per class under each named setting (e.g. before/after a sampler).

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """
    fig, ax = plt.subplots(figsize=(7, 3))
    width = 0.8 / len(counts)
    for i, (name, values) in enumerate(counts.items()):
        positions = [x + (i - (len(counts) - 1) / 2) * width for x in range(len(classes))]
        ax.bar(positions, values, width=width, label=name)
    ax.set_xticks(range(len(classes)), classes)
    ax.set(ylabel="samples")
    ax.legend()
    fig.tight_layout()
    return fig
