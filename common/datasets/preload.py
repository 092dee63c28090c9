"""Decode once, augment every epoch: a dataset held in memory as one uint8 array.

The expensive, deterministic prefix of an image pipeline (decode + resize) is the same
every epoch; doing it once up front leaves only the cheap random suffix (flips,
``ToTensor``, ``Normalize``) per access. The pixels live in one NumPy buffer, not a list
of per-image objects, so DataLoader workers do not copy them on read (see ``common.data``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from common.data import readonly_view


class PreloadedDataset(Dataset):
    """Decode and resize every image of ``source`` once into one uint8 array; transform per item.

    The deterministic, expensive prefix of a pipeline (decode + resize) runs once; the
    random, cheap suffix (augmentation, ``ToTensor``, ``Normalize``) runs every epoch.
    The pixels sit in a single NumPy buffer (no per-image objects: see copy-on-read).

    Args:
        source: A dataset returning ``(PIL image, int label)`` (no transform of its own).
        size: ``(width, height)`` every image is resized to.
        transform: Applied to the resized PIL image on every access.

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """

    def __init__(self, source: Dataset, *, size: tuple[int, int],
                 transform: Callable | None = None) -> None:
        width, height = size
        self.transform = transform
        self._pixels = np.empty((len(source), height, width, 3), dtype=np.uint8)
        self._labels = np.empty(len(source), dtype=np.int64)
        for index in range(len(source)):
            image, label = source[index]
            if not isinstance(image, Image.Image):
                raise TypeError(f"source[{index}] returned {type(image).__name__}, expected a PIL "
                                "image (build the source without a transform)")
            self._pixels[index] = np.asarray(image.convert("RGB").resize((width, height)))
            self._labels[index] = int(label)

    @property
    def labels(self) -> np.ndarray:
        """All labels, in index order (a read-only view)."""
        return readonly_view(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, index: int):
        image = Image.fromarray(self._pixels[index])
        return (self.transform(image) if self.transform else image), int(self._labels[index])
