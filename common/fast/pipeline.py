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
  (torchvision 0.29 deprecates its image decoders in favour of TorchCodec; they still work,
  and :func:`decode_tensor` silences exactly that one warning: TorchCodec is not a dependency
  of this course, and the decoders it replaces are the ones torchvision 0.29 ships.)
- :class:`Uint8EvalDataset`: the guide's ``CustomImageDataset`` returning uint8 samples, with
  a batched ``__getitems__`` (one call per batch instead of one per sample).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

from common.data import CustomImageDataset, decode_errors, describe_image, open_image
from common.imagenet import IMAGENET_MEAN, IMAGENET_STD
from common.images.pixels import shown_size, squared, viewer_rgb

DECODERS = ("pil_draft", "torchvision")
#: The start of torchvision 0.29's DeprecationWarning for its image decoders (see decode_tensor).
_TV_DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"


def decode_tensor(data: torch.Tensor, *, jpeg: bool = False) -> torch.Tensor:
    """Encoded bytes (a 1-D uint8 tensor) -> uint8 RGB ``(3, H, W)`` with ``torchvision.io``.

    EXIF orientation is applied, as on the PIL paths (``common.images.pixels.viewer_rgb``).
    ``jpeg=True`` calls ``decode_jpeg`` directly (skips format sniffing). The one
    ``DeprecationWarning`` torchvision 0.29 raises on every call (its decoders move to
    TorchCodec, not installed here) is silenced for this call only; any other warning shows.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg  # ~1.5 s: only where used

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_TV_DEPRECATION, category=DeprecationWarning)
        if jpeg:
            return decode_jpeg(data, mode=ImageReadMode.RGB, apply_exif_orientation=True)
        return decode_image(data, mode=ImageReadMode.RGB, apply_exif_orientation=True)


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

    def __init__(self, *, resize_size: int = 256, crop_size: int = 224, draft: bool = True,
                 orientation: str = "exif", resize: str = "crop") -> None:
        if crop_size > resize_size:
            raise ValueError(f"crop_size {crop_size} exceeds resize_size {resize_size}")
        self.orientation, self.resize = orientation, resize
        self.resize_size = resize_size
        self.crop_size = crop_size
        self.draft = draft

    def __call__(self, path: str | os.PathLike, *, where: str = "") -> torch.Tensor:
        with decode_errors(describe_image(path, where)):
            with open_image(path) as image:
                shown = shown_size(image, self.orientation)  # as a viewer shows it (EXIF)
                target = resized_size(*shown, self.resize_size)
                if self.draft and image.format == "JPEG":
                    stored = target if shown == image.size else target[::-1]
                    image.draft("RGB", stored)  # never smaller than the target
                image = viewer_rgb(image, orientation=self.orientation, copy=False)
        if self.resize != "crop":  # squash or pad to a square first (common.images.pixels)
            image = squared(image, self.resize)
            target = resized_size(*image.size, self.resize_size)
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
        from torchvision.transforms import v2  # ~1.5 s (torch._dynamo): only where used

        self.resize_size = resize_size
        self.crop_size = crop_size
        self.geometry = v2.Compose([v2.Resize(resize_size, antialias=True),
                                    v2.CenterCrop(crop_size)])

    def __call__(self, path: str | os.PathLike, *, where: str = "") -> torch.Tensor:
        from torchvision.io import read_file

        with decode_errors(describe_image(path, where)):
            with warnings.catch_warnings():  # read_file carries the same deprecation warning
                warnings.filterwarnings("ignore", message=_TV_DEPRECATION,
                                        category=DeprecationWarning)
                data = read_file(os.fspath(path))
            image = decode_tensor(data)
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
        where = f"{self.annotations_file.name} line {self.lines[idx]}"
        return self.decoder(self.paths[idx], where=where), int(self.labels[idx])

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.stack([self[i][0] for i in indices])
        return images, torch.from_numpy(self.labels[np.asarray(indices)])


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


def normalize_into(images: torch.Tensor, out: torch.Tensor, scale: torch.Tensor,
                   shift: torch.Tensor) -> torch.Tensor:
    """``out[i] = images[i] * scale + shift`` for a uint8 batch, written into ``out`` (float32).

    On the CPU it works image by image: one image's floats (600 kB at 224 px) stay in the
    CPU cache between the convert, the multiply and the add, so the three passes cost about
    one trip to memory. Measured against the alternatives (a fresh ``.float()`` then
    ``mul_``/``add_``; ``torch.mul(..., out=)``; ``addcmul``; per-image ``addcmul``) this was
    the fastest on one thread (``python -m common.fast.benchmark --formulations-only``).
    On other devices it runs batch-wide (one kernel each, not one per image).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    if out.device.type != "cpu":
        return out.copy_(images).mul_(scale).add_(shift)
    scale, shift = scale[0], shift[0]
    for image, target in zip(images, out, strict=True):
        target.copy_(image).mul_(scale).add_(shift)
    return out


class BatchNormalize:
    """uint8 ``(B, 3, H, W)`` -> float32 ``(x / 255 - mean) / std``, once per batch.

    Computed as ``x * scale + shift`` by :func:`normalize_into`, on whatever device the batch
    is on. Matches ``ToTensor`` + ``Normalize`` to ~1e-6. With ``buffers=k`` (k >= 1) the
    output is written into a ring of ``k`` preallocated float batches and reused: no
    allocation (and no page faults) per batch, but a returned batch is overwritten ``k``
    calls later, so a caller that keeps batches must ``.clone()`` them. ``buffers=0``
    (the default) returns a fresh tensor every call.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, *, mean: Sequence[float] = IMAGENET_MEAN,
                 std: Sequence[float] = IMAGENET_STD, buffers: int = 0) -> None:
        if buffers < 0:
            raise ValueError(f"buffers must be >= 0, got {buffers}")
        std_t = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        mean_t = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.scale = 1.0 / (255.0 * std_t)
        self.shift = -mean_t / std_t
        self.buffers = buffers
        self._on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._ring: list[torch.Tensor] = []
        self._calls = 0

    def constants(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scale, shift)`` as ``(1, C, 1, 1)`` float32 tensors on ``device``."""
        if device not in self._on:
            self._on[device] = (self.scale.to(device), self.shift.to(device))
        return self._on[device]

    def output(self, shape: torch.Size, device: torch.device) -> torch.Tensor:
        """The float32 tensor the next batch is written into (from the ring, or fresh)."""
        if self.buffers == 0:
            return torch.empty(shape, dtype=torch.float32, device=device)
        slot = self._calls % self.buffers
        self._calls += 1
        if len(self._ring) <= slot:
            self._ring.append(torch.empty(shape, dtype=torch.float32, device=device))
        buffer = self._ring[slot]
        if buffer.device != device or buffer.shape[1:] != shape[1:] or len(buffer) < shape[0]:
            buffer = self._ring[slot] = torch.empty(shape, dtype=torch.float32, device=device)
        return buffer[:shape[0]]  # a shorter last batch uses the front of the buffer

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise ValueError(f"expected a uint8 (B, C, H, W) batch, got {images.dtype} "
                             f"{tuple(images.shape)}")
        scale, shift = self.constants(images.device)
        return normalize_into(images, self.output(images.shape, images.device), scale, shift)


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


class CacheLoader:
    """In-process batches straight from a ``CachedImageDataset``, normalized into reused buffers.

    The fastest path this chapter found from a built cache to normalized batches: for each
    batch, every sampled row of the memmap is converted and normalized *directly* into a
    preallocated float batch (``normalize_into``, image by image), with no intermediate
    uint8 batch and no allocation. Same batches as ``NormalizedLoader(make_fast_loader(
    dataset, ...))`` for the same sampler. ``num_workers=0`` by design: from the page cache
    an image costs microseconds, less than sending it between processes. A yielded batch is
    overwritten ``buffers`` batches later (``.clone()`` it to keep it).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, dataset: Dataset, *, batch_size: int, shuffle: bool = False,
                 drop_last: bool = False, generator: torch.Generator | None = None,
                 buffers: int = 2, normalize: BatchNormalize | None = None) -> None:
        if dataset.transform is not None:
            raise ValueError("CacheLoader normalizes raw cache rows; for a per-sample "
                             "transform use NormalizedLoader(make_fast_loader(dataset, ...))")
        self.dataset = dataset
        sampler = RandomSampler(dataset, generator=generator) if shuffle \
            else SequentialSampler(dataset)
        self.batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.normalize = normalize or BatchNormalize(buffers=buffers)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        rows = torch.from_numpy(self.dataset.array())  # a view of the memmap, no copy
        labels = torch.tensor(self.dataset.labels)  # a copy: the dataset's view is read-only
        scale, shift = self.normalize.constants(torch.device("cpu"))
        scale, shift = scale[0], shift[0]
        for indices in self.batch_sampler:
            out = self.normalize.output(torch.Size((len(indices), *rows.shape[1:])), rows.device)
            for target, index in zip(out, indices, strict=True):
                target.copy_(rows[index]).mul_(scale).add_(shift)
            yield out, labels[indices]
