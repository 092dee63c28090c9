"""The small convolutional network every chapter trains, and its GroupNorm variant."""

from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Three conv blocks, global average pooling and a linear classifier.

    Works for any input size (the pooling makes the classifier size-independent), is
    small enough to train in seconds on a laptop CPU, and learns the shapes dataset.

    Args:
        num_classes: Number of output logits.
        width: Channels of the first block; later blocks double it.
        in_channels: 3 for RGB.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """

    def __init__(self, num_classes: int = 6, *, width: int = 16, in_channels: int = 3) -> None:
        super().__init__()
        blocks = []
        channels = in_channels
        for out_channels in (width, width * 2, width * 4):
            blocks += [
                nn.Conv2d(channels, out_channels, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(out_channels),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            channels = out_channels
        self.features = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.pool(self.features(images)).flatten(1)
        return self.classifier(features)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def batchnorm_to_groupnorm(model: nn.Module) -> nn.Module:
    """Replace every ``BatchNorm2d`` by a ``GroupNorm`` over the same channels, in place.

    GroupNorm normalises each sample on its own, so the loss is a plain mean over samples
    and a batch split across ranks gives exactly the gradient of the whole batch.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    for name, child in model.named_children():
        if isinstance(child, nn.BatchNorm2d):
            groups = 4 if child.num_features % 4 == 0 else 1
            setattr(model, name, nn.GroupNorm(groups, child.num_features))
        else:
            batchnorm_to_groupnorm(child)
    return model
