"""Transform presets (guide §2.2.2): small callable classes, safe to pickle into workers.

Each preset exists twice: with the classic ``torchvision.transforms`` API the guide uses
(PIL in, float tensor out) and with ``torchvision.transforms.v2``, which also accepts
uint8 tensors and is the faster path used in the efficiency chapter.
"""

from __future__ import annotations

import torch
from torchvision import transforms
from torchvision.transforms import v2

#: The ImageNet statistics the guide's ``Normalize`` uses (§2.2.2).
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)


class ClassicTrainPreset:
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

    def __call__(self, image):
        return self.pipeline(image)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pipeline})"


class ClassicEvalPreset:
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

    def __call__(self, image):
        return self.pipeline(image)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pipeline})"


class V2TrainPreset:
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

    def __call__(self, image):
        return self.pipeline(image)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pipeline})"


class V2EvalPreset:
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

    def __call__(self, image):
        return self.pipeline(image)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pipeline})"
