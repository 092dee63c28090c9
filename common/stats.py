"""Per-channel mean and std of a dataset in one streaming pass (guide §2.2.2).

``Normalize(mean, std)`` should use the statistics of *your* training data; the guide
uses ImageNet's. Computing them must not hold the dataset in memory, so batches are
folded into running (count, mean, M2) sums with Chan et al.'s parallel update, in
float64 so that millions of pixels do not lose precision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm


@dataclass(frozen=True)
class ChannelStats:
    """Per-channel statistics of the pixels seen: what ``Normalize`` takes.

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]
    count: int  # pixels per channel


class RunningChannelStats:
    """Accumulates per-channel mean and (population) variance batch by batch.

    Args:
        num_channels: Channels of the images (3 for RGB).

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """

    def __init__(self, num_channels: int = 3) -> None:
        self.count = 0
        self.mean = torch.zeros(num_channels, dtype=torch.float64)
        self.m2 = torch.zeros(num_channels, dtype=torch.float64)  # sum of squared deviations

    def update(self, images: torch.Tensor) -> None:
        """Add a (C, H, W) image or an (N, C, H, W) batch of float images."""
        if images.dim() == 3:
            images = images.unsqueeze(0)
        if images.dim() != 4 or images.shape[1] != len(self.mean):
            raise ValueError(f"expected (N, {len(self.mean)}, H, W) images, got shape "
                             f"{tuple(images.shape)}")
        pixels = images.detach().to(torch.float64).transpose(0, 1).reshape(len(self.mean), -1)
        n = pixels.shape[1]
        if n == 0:
            return
        batch_mean = pixels.mean(dim=1)
        batch_m2 = ((pixels - batch_mean[:, None]) ** 2).sum(dim=1)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + batch_m2 + delta**2 * (self.count * n / total)
        self.count = total

    def result(self) -> ChannelStats:
        """The statistics so far (population std, like ``numpy.std``)."""
        if self.count == 0:
            raise ValueError("no pixels seen yet")
        std = (self.m2 / self.count).sqrt()
        return ChannelStats(tuple(self.mean.tolist()), tuple(std.tolist()), self.count)


def channel_stats(batches: Iterable, *, num_channels: int = 3,
                  progress: bool = False) -> ChannelStats:
    """Mean and std per channel over everything ``batches`` yields, in one pass.

    Args:
        batches: A DataLoader (or any iterable) yielding ``(images, labels)`` pairs or bare
            image tensors, each (N, C, H, W) or (C, H, W), floats (e.g. after ``ToTensor``).
            Images of different sizes are fine: every pixel counts once.
        num_channels: Channels of the images.
        progress: Show a tqdm bar.

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """
    running = RunningChannelStats(num_channels)
    for item in tqdm(batches, desc="stats", disable=not progress, leave=False):
        images = item[0] if isinstance(item, (tuple, list)) else item
        if isinstance(images, (tuple, list)):  # a list of variable-size images
            for image in images:
                running.update(image)
        else:
            running.update(images)
    return running.result()
