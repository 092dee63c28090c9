"""Transform presets (guide §2.2.2): small callable classes, safe to pickle into workers.

Each preset exists twice: with the classic ``torchvision.transforms`` API the guide uses
(PIL in, float tensor out) and with ``torchvision.transforms.v2``, which also accepts
uint8 tensors and is the faster path used in the efficiency chapter.
"""

from __future__ import annotations

import torch
from torchvision import transforms
from torchvision.transforms import v2

from common.imagenet import IMAGENET_MEAN, IMAGENET_STD  # the guide's Normalize statistics (§2.2.2)


class _Preset:
    """Shared shape of every preset: ``__init__`` builds ``self.pipeline``; calling applies it."""

    pipeline: transforms.Compose | v2.Compose

    def __call__(self, image):
        return self.pipeline(image)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pipeline})"


class ClassicTrainPreset(_Preset):
    """Training augmentation with the classic API: random crop-and-scale, flip, rotation,
    colour jitter, then ``ToTensor`` (scales to [0, 1]) and ``Normalize``.

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """

    def __init__(self, *, crop_size: int = 224, scale: tuple[float, float] = (0.5, 1.0),
                 hflip_prob: float = 0.5, degrees: float = 15.0,
                 jitter: tuple[float, float, float] = (0.3, 0.3, 0.3),
                 mean: tuple[float, ...] = IMAGENET_MEAN,
                 std: tuple[float, ...] = IMAGENET_STD) -> None:
        self.pipeline = transforms.Compose([
            transforms.RandomResizedCrop(crop_size, scale=scale),
            transforms.RandomHorizontalFlip(hflip_prob),
            transforms.RandomRotation(degrees),
            transforms.ColorJitter(*jitter),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ])


class ClassicEvalPreset(_Preset):
    """The guide's evaluation pipeline: ``Resize``, ``CenterCrop``, ``ToTensor``, ``Normalize``.

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """

    def __init__(self, *, resize_size: int = 256, crop_size: int = 224,
                 mean: tuple[float, ...] = IMAGENET_MEAN,
                 std: tuple[float, ...] = IMAGENET_STD) -> None:
        self.pipeline = transforms.Compose([
            transforms.Resize(resize_size),
            transforms.CenterCrop(crop_size),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ])


class V2TrainPreset(_Preset):
    """``ClassicTrainPreset`` with ``transforms.v2``: works on PIL images and uint8 tensors;
    geometry runs on uint8, the float conversion and normalization come last.

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """

    def __init__(self, *, crop_size: int = 224, scale: tuple[float, float] = (0.5, 1.0),
                 hflip_prob: float = 0.5, degrees: float = 15.0,
                 jitter: tuple[float, float, float] = (0.3, 0.3, 0.3),
                 mean: tuple[float, ...] = IMAGENET_MEAN,
                 std: tuple[float, ...] = IMAGENET_STD) -> None:
        self.pipeline = v2.Compose([
            v2.ToImage(),
            v2.RandomResizedCrop(crop_size, scale=scale, antialias=True),
            v2.RandomHorizontalFlip(hflip_prob),
            v2.RandomRotation(degrees),
            v2.ColorJitter(*jitter),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean, std),
        ])


class V2EvalPreset(_Preset):
    """``ClassicEvalPreset`` with ``transforms.v2`` (same output within resampling error).

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """

    def __init__(self, *, resize_size: int = 256, crop_size: int = 224,
                 mean: tuple[float, ...] = IMAGENET_MEAN,
                 std: tuple[float, ...] = IMAGENET_STD) -> None:
        self.pipeline = v2.Compose([
            v2.ToImage(),
            v2.Resize(resize_size, antialias=True),
            v2.CenterCrop(crop_size),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean, std),
        ])


class AddGaussianNoise:
    """A custom transform: add zero-mean Gaussian noise to a float tensor image.

    Draws from torch's global RNG, which the DataLoader seeds per worker from its
    ``generator``: a seeded loader gives the same noise on every run.

    Args:
        std: Standard deviation of the noise (in the tensor's units).
        p: Probability of adding noise to a given image.

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """

    def __init__(self, *, std: float = 0.05, p: float = 1.0) -> None:
        if std < 0 or not 0.0 <= p <= 1.0:
            raise ValueError(f"need std >= 0 and 0 <= p <= 1, got std={std}, p={p}")
        self.std = std
        self.p = p

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if not isinstance(image, torch.Tensor) or not image.is_floating_point():
            raise TypeError(f"AddGaussianNoise needs a float tensor (after ToTensor), got "
                            f"{type(image).__name__}")
        if self.p < 1.0 and torch.rand(()) >= self.p:
            return image
        return image + torch.randn_like(image) * self.std

    def __repr__(self) -> str:
        return f"{type(self).__name__}(std={self.std}, p={self.p})"
