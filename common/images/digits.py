"""A real dataset written out as a learner's own would look: an ImageFolder of PNG files.

Chapter 7 carries scikit-learn's copy of the UCI handwritten digits (``load_digits``: 1,797
greyscale 8x8 images, pixel values 0..16, ten classes) through the course. This module takes
the arrays, not scikit-learn (the ``digits`` extra; ``common`` needs only the runtime
dependencies), and writes them as the layout ``common.images.layouts`` reads::

    ROOT/train/<class>/<index>.png      ROOT/val/<class>/<index>.png

with a fixed, seeded split that keeps every class's share (a stratified split): the same
seed gives the same files on every machine. Each PNG is the 8x8 image scaled to 0..255;
the trainers resize it (``--image-size``). A DataLoader worker needs its classes in an
importable module, so what the chapter's Dataset and loaders need lives here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class DigitsSplit:
    """Which sample goes where: indices into the arrays, per split, in ascending order.

    Introduced in chapters/07_your_data.ipynb.
    """

    train: np.ndarray
    val: np.ndarray


def to_uint8(images: np.ndarray, *, max_value: float = 16.0) -> np.ndarray:
    """``images`` (any shape, values ``0..max_value``) as uint8 ``0..255``, rounded.

    Raises:
        ValueError: For values outside ``0..max_value`` (naming the first such sample).

    Introduced in chapters/07_your_data.ipynb.
    """
    images = np.asarray(images, dtype=np.float64)
    bad = np.flatnonzero(((images < 0) | (images > max_value)).reshape(len(images), -1).any(1))
    if len(bad):
        raise ValueError(f"sample {bad[0]}: pixel values must lie in 0..{max_value:g}, found "
                         f"{images[bad[0]].min():g}..{images[bad[0]].max():g}")
    return np.rint(images * (255.0 / max_value)).astype(np.uint8)


def stratified_split(labels: np.ndarray, *, val_fraction: float = 0.2,
                     seed: int = 0) -> DigitsSplit:
    """A seeded split that keeps each class's share: ``round(n * val_fraction)`` of every class's
    ``n`` samples to validation (at least 1), the rest to training.

    Raises:
        ValueError: For a fraction outside (0, 1), or a class too small to give both splits one.

    Introduced in chapters/07_your_data.ipynb.
    """
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    val = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        if len(members) < 2:
            raise ValueError(f"class {label}: {len(members)} sample(s); a split needs 2 or more")
        count = min(max(1, round(len(members) * val_fraction)), len(members) - 1)
        val.append(rng.permutation(members)[:count])
    val_index = np.sort(np.concatenate(val))
    return DigitsSplit(np.setdiff1d(np.arange(len(labels)), val_index), val_index)


def write_digits_folder(images: np.ndarray, labels: np.ndarray, root: str | os.PathLike, *,
                      val_fraction: float = 0.2, seed: int = 0, max_value: float = 16.0,
                      classes: tuple[str, ...] | None = None) -> dict[str, int]:
    """Write ``images`` (N, H, W) with integer ``labels`` as ``root/{train,val}/<class>/<i>.png``.

    ``classes`` names the labels ``0..K-1`` (default ``"0"``, ``"1"``, ...); the file name is
    the sample's index in the arrays, so every PNG can be traced back. ``root`` must not exist
    or be empty: nothing is overwritten.

    Returns:
        ``{"train": count, "val": count}``.

    Raises:
        ValueError: For arrays of different lengths or shapes other than (N, H, W), labels
            outside ``0..K-1``, a non-empty ``root``.

    Introduced in chapters/07_your_data.ipynb.
    """
    images, labels = np.asarray(images), np.asarray(labels)
    if images.ndim != 3 or len(images) != len(labels):
        raise ValueError(f"expected images (N, H, W) and N labels, got {images.shape} and "
                         f"{labels.shape}")
    names = classes or tuple(str(label) for label in range(int(labels.max()) + 1))
    if labels.min() < 0 or labels.max() >= len(names):
        raise ValueError(f"labels must lie in 0..{len(names) - 1} (one per class name), found "
                         f"{labels.min()}..{labels.max()}")
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"{root} is not empty: write the ImageFolder into a new folder")
    pixels = to_uint8(images, max_value=max_value)
    from common.images.layouts import SPLITS  # torch: only when a folder is written

    split = stratified_split(labels, val_fraction=val_fraction, seed=seed)
    for name, indices in zip(SPLITS, (split.train, split.val), strict=True):
        for index in indices:
            path = root / name / names[labels[index]] / f"{index:04d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels[index]).save(path)
    return {"train": len(split.train), "val": len(split.val)}
