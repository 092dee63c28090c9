"""Faster formulations of the guide's eval pipeline that produce the same normalized batch.

The guide turns every sample into a float tensor and normalizes it on its own (§2.2.1:
``Resize(256)``, ``CenterCrop(224)``, ``ToTensor``, ``Normalize``). The formulations here
keep each sample as ``uint8`` until a whole batch exists, then convert and normalize the
batch in one pass (:class:`BatchNormalize`) — on the GPU when there is one. That moves a
quarter of the bytes between processes and devices and runs the float maths once per batch.

- :class:`DraftPilDecoder`: PIL decode with JPEG *draft mode* (the decoder scales by 1/2,
  1/4 or 1/8 in the DCT domain when the image is at least twice the target size), then the
  same PIL resize and crop as the guide. Bit-identical to the guide when draft does not apply.
- :class:`TorchvisionDecoder`: ``torchvision.io.decode_image`` (libjpeg-turbo) and
  ``transforms.v2`` resize/crop on uint8 tensors; within one or two uint8 levels of PIL.
  (torchvision 0.29 deprecates its image decoders in favour of TorchCodec; they still work.)
- :class:`Uint8EvalDataset`: the guide's ``CustomImageDataset`` returning uint8 samples, with
  a batched ``__getitems__`` (one call per batch instead of one per sample).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.io import ImageReadMode, decode_image, read_file
from torchvision.transforms import v2

from common.data import CustomImageDataset, decode_errors, describe_image, open_image
from common.transforms import IMAGENET_MEAN, IMAGENET_STD

DECODERS = ("pil_draft", "torchvision")


def resized_size(width: int, height: int, resize_size: int) -> tuple[int, int]:
    """The (width, height) that ``transforms.Resize(resize_size)`` gives an image of this size.

    The shorter side becomes ``resize_size``; the longer side keeps the aspect ratio,
    truncated to an integer exactly as torchvision does.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    if width <= height:
        return resize_size, int(resize_size * height / width)
    return int(resize_size * width / height), resize_size


def center_box(width: int, height: int, crop_size: int) -> tuple[int, int, int, int]:
    """The (left, top, right, bottom) box of ``transforms.CenterCrop(crop_size)``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    if width < crop_size or height < crop_size:
        raise ValueError(f"image of {width}x{height} is smaller than the crop {crop_size}")
    left = int(round((width - crop_size) / 2.0))
    top = int(round((height - crop_size) / 2.0))
    return left, top, left + crop_size, top + crop_size


class DraftPilDecoder:
    """File -> uint8 ``(3, crop, crop)`` tensor: PIL with JPEG draft mode, Resize, CenterCrop.

    The output size is computed from the file's *original* size, so a drafted (smaller)
    decode is resized to exactly the guide's geometry. ``draft=False`` decodes in full.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, *, resize_size: int = 256, crop_size: int = 224, draft: bool = True) -> None:
        if crop_size > resize_size:
            raise ValueError(f"crop_size {crop_size} exceeds resize_size {resize_size}")
        self.resize_size = resize_size
        self.crop_size = crop_size
        self.draft = draft

    def __call__(self, path: str | os.PathLike, *, where: str = "") -> torch.Tensor:
        with decode_errors(describe_image(path, where)):
            with open_image(path) as image:
                target = resized_size(*image.size, self.resize_size)
                if self.draft and image.format == "JPEG":
                    image.draft("RGB", target)  # never smaller than the target
                image = image.convert("RGB")
        image = image.resize(target, Image.Resampling.BILINEAR)
        image = image.crop(center_box(*target, self.crop_size))
        return torch.from_numpy(np.asarray(image).transpose(2, 0, 1).copy())

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(resize_size={self.resize_size}, "
                f"crop_size={self.crop_size}, draft={self.draft})")


class TorchvisionDecoder:
    """File -> uint8 ``(3, crop, crop)`` tensor: ``torchvision.io`` decode, v2 Resize/CenterCrop.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, *, resize_size: int = 256, crop_size: int = 224) -> None:
        self.resize_size = resize_size
        self.crop_size = crop_size
        self.geometry = v2.Compose([v2.Resize(resize_size, antialias=True),
                                    v2.CenterCrop(crop_size)])

    def __call__(self, path: str | os.PathLike, *, where: str = "") -> torch.Tensor:
        with decode_errors(describe_image(path, where)):
            image = decode_image(read_file(os.fspath(path)), mode=ImageReadMode.RGB)
        return self.geometry(image)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(resize_size={self.resize_size}, "
                f"crop_size={self.crop_size})")


def make_decoder(name: str, *, resize_size: int = 256,
                 crop_size: int = 224) -> DraftPilDecoder | TorchvisionDecoder:
    """A decoder by name: ``"pil_draft"``, ``"pil"`` (no draft) or ``"torchvision"``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    if name in ("pil_draft", "pil"):
        return DraftPilDecoder(resize_size=resize_size, crop_size=crop_size,
                               draft=name == "pil_draft")
    if name == "torchvision":
        return TorchvisionDecoder(resize_size=resize_size, crop_size=crop_size)
    raise ValueError(f"unknown decoder {name!r}; choose one of {DECODERS + ('pil',)}")


class Uint8EvalDataset(CustomImageDataset):
    """The guide's ``CustomImageDataset`` yielding uint8 eval crops, with batched fetching.

    ``__getitem__`` returns ``(uint8 (3, crop, crop) tensor, int)``. ``__getitems__``
    (which ``DataLoader`` calls once per batch when a dataset defines it) returns the whole
    batch already stacked: ``(uint8 (B, 3, crop, crop), int64 (B,))``; use it with
    ``collate_fn=keep_batch`` (see :func:`make_fast_loader`).

    Args:
        annotations_file: The CSV (as for ``CustomImageDataset``).
        img_dir: Folder the CSV's paths are relative to.
        decoder: ``"pil_draft"``, ``"pil"`` or ``"torchvision"`` (see :func:`make_decoder`).
        resize_size: Shorter side after resizing (the guide: 256).
        crop_size: Side of the centre crop (the guide: 224).
        **kwargs: Passed on to ``CustomImageDataset`` (``num_classes``, ``on_bad``, ...).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, annotations_file: str | os.PathLike, img_dir: str | os.PathLike, *,
                 decoder: str = "pil_draft", resize_size: int = 256, crop_size: int = 224,
                 **kwargs) -> None:
        super().__init__(annotations_file, img_dir, **kwargs)
        self.decoder = make_decoder(decoder, resize_size=resize_size, crop_size=crop_size)

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, int]:
        where = f"{self.annotations_file.name} line {self._lines[idx]}"
        return self.decoder(self._paths[idx], where=where), int(self._labels[idx])

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.stack([self[i][0] for i in indices])
        return images, torch.from_numpy(self._labels[np.asarray(indices)])


def keep_batch(batch):
    """``collate_fn`` for datasets whose ``__getitems__`` already returns a whole batch.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    return batch


def make_fast_loader(dataset: Dataset, *, batch_size: int, num_workers: int = 0,
                     shuffle: bool = False, pin_memory: bool = False,
                     prefetch_factor: int | None = None, persistent_workers: bool | None = None,
                     generator: torch.Generator | None = None) -> DataLoader:
    """A ``DataLoader`` over a dataset with a batched ``__getitems__`` (uint8 batches out).

    ``persistent_workers`` defaults to ``num_workers > 0``: worker start-up is paid once,
    not every epoch.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    if persistent_workers is None:
        persistent_workers = num_workers > 0
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                      collate_fn=keep_batch, pin_memory=pin_memory,
                      prefetch_factor=prefetch_factor if num_workers > 0 else None,
                      persistent_workers=persistent_workers, generator=generator)


class BatchNormalize:
    """uint8 ``(B, 3, H, W)`` -> float32 ``(x / 255 - mean) / std``, once per batch.

    Computed as ``x * scale + shift`` (two in-place passes over a fresh float tensor) on
    whatever device the batch is on. Matches ``ToTensor`` + ``Normalize`` to ~1e-6.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, *, mean: Sequence[float] = IMAGENET_MEAN,
                 std: Sequence[float] = IMAGENET_STD) -> None:
        std_t = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        mean_t = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.scale = 1.0 / (255.0 * std_t)
        self.shift = -mean_t / std_t
        self._on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise ValueError(f"expected a uint8 (B, C, H, W) batch, got {images.dtype} "
                             f"{tuple(images.shape)}")
        if images.device not in self._on:
            self._on[images.device] = (self.scale.to(images.device),
                                       self.shift.to(images.device))
        scale, shift = self._on[images.device]
        return images.to(torch.float32).mul_(scale).add_(shift)


class NormalizedLoader:
    """Wraps a uint8 loader: moves each batch to ``device`` (as uint8), then normalizes it.

    Normalizing after the copy means a quarter of the bytes cross to the GPU and the float
    maths runs there. With ``pin_memory=True`` on the loader, copies are non-blocking.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, loader: Iterable, *, device: torch.device | str = "cpu",
                 normalize: BatchNormalize | None = None) -> None:
        self.loader = loader
        self.device = torch.device(device)
        self.normalize = normalize or BatchNormalize()

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for images, labels in self.loader:
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            yield self.normalize(images), labels


class BatchRandomFlip:
    """Flip each image of a uint8 (or float) batch left-right with probability ``p``.

    One decision per sample, made with tensor ops on the batch's own device: cheap
    augmentation after the cache, or on the GPU after the copy.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, *, p: float = 0.5, generator: torch.Generator | None = None) -> None:
        self.p = p
        self.generator = generator

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        draws = torch.rand(len(images), generator=self.generator)
        flip = (draws < self.p).to(images.device).view(-1, 1, 1, 1)
        return torch.where(flip, images.flip(-1), images)
