"""A train/val split of your images: stratified, seeded, the same bytes never on both sides.

:func:`split_folder` splits a folder of class folders (``SRC/<class>/<image>``, read through
``common.images.listing``) into ``OUT/train/<class>/`` and ``OUT/val/<class>/`` by hard links
(no bytes copied; a copy where links cannot be made, e.g. to another disk) or copies.
:func:`split_csv` splits a labels CSV (the guide's layout) into ``train.csv`` and ``val.csv``
beside each other, the image folder untouched. Both keep each class's share
(``common.images.digits.stratified_split``: ``round(n * val_fraction)`` of a class's ``n`` images to
validation, at least 1) and are seeded: the same input and seed give the same split.

Files with the same bytes (a photo saved twice) go to the same side together; the same bytes
under two classes are refused, naming the files (one image, two labels). The entry point is
``python -m common.images.split`` (``companion-split-images``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path

import numpy as np

from common.annotations import BadSampleError, read_annotations, resolve_inside
from common.images.digits import stratified_split
from common.images.listing import list_folder

MODES = ("link", "copy")


def _units(paths: list[str], labels: list[int], classes: tuple[str, ...]):
    """Groups of files with the same bytes (one unit each), refusing a group of two classes."""
    groups: dict[str, list[int]] = {}
    for index, path in enumerate(paths):
        groups.setdefault(hashlib.sha256(Path(path).read_bytes()).hexdigest(), []).append(index)
    for members in groups.values():
        if len({labels[i] for i in members}) > 1:
            named = ", ".join(f"{paths[i]} ({classes[labels[i]]})" for i in members)
            raise BadSampleError(f"the same bytes under two classes: {named}; one image needs "
                                 "one label: delete the wrong copy")
    return list(groups.values())


def split_indices(paths: list[str], labels: list[int], classes: tuple[str, ...], *,
                  val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """``(train, val)`` indices: stratified by label, seeded, copies of one image kept together.

    Introduced in docs/scripts.md ("Your own images").
    """
    units = _units(paths, labels, classes)
    split = stratified_split(np.array([labels[unit[0]] for unit in units]),
                             val_fraction=val_fraction, seed=seed)
    return (sorted(i for u in split.train for i in units[u]),
            sorted(i for u in split.val for i in units[u]))


def link_or_copy(source: str | os.PathLike, target: str | os.PathLike) -> str:
    """A hard link of ``source`` at ``target``, or a copy where a link cannot be made (another
    disk, a file system without hard links); ``"link"`` or ``"copy"``. A ``copy_function`` for
    ``shutil.copytree``.

    Introduced in chapters/07_your_data.ipynb.
    """
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
        return "link"
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
    shutil.copy2(source, target)
    return "copy"


def _place(source: str, target: Path, mode: str) -> str:
    if mode == "link":
        return link_or_copy(source, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
    return "copy"


def split_folder(source: str | os.PathLike, out: str | os.PathLike, *, val_fraction: float = 0.2,
                 seed: int = 0, mode: str = "link") -> dict[str, int]:
    """``source/<class>/...`` into ``out/train/<class>/...`` and ``out/val/<class>/...``.

    Returns ``{"train": n, "val": m, "copied": c}`` (``copied``: files copied where ``mode="link"``
    could not link). Raises ``BadSampleError`` for the listing's problems, the same bytes in two
    classes, or a non-empty ``out``.

    Introduced in docs/scripts.md ("Your own images").
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise BadSampleError(f"{out} is not empty: split into a new folder")
    listing = list_folder(source).refuse()
    print(listing.summary())
    paths = [path for path, _ in listing.samples]
    labels = [label for _, label in listing.samples]
    train, val = split_indices(paths, labels, listing.classes, val_fraction=val_fraction,
                               seed=seed)
    counts = {"train": len(train), "val": len(val), "copied": 0}
    for split, indices in (("train", train), ("val", val)):
        for index in indices:
            inside = Path(paths[index]).relative_to(source).parts[1:]  # below the class folder
            target = out / split / listing.classes[labels[index]] / Path(*inside)
            counts["copied"] += _place(paths[index], target, mode) == "copy" and mode == "link"
    return counts


def split_csv(csv: str | os.PathLike, images: str | os.PathLike, out: str | os.PathLike, *,
              val_fraction: float = 0.2, seed: int = 0) -> dict[str, int]:
    """A labels CSV into ``out/train.csv`` and ``out/val.csv`` (rows unchanged, in CSV order);
    every row's file checked inside ``images``.

    Introduced in docs/scripts.md ("Your own images").
    """
    csv, images, out = Path(csv), Path(images), Path(out)
    frame = read_annotations(csv)
    names = [str(label).strip() for label in frame.iloc[:, 1]]
    classes = tuple(sorted(set(names)))
    labels = [classes.index(name) for name in names]
    paths = [str(resolve_inside(images, name, where=f"{csv.name} line {row + 2}"))
             for row, name in enumerate(frame.iloc[:, 0])]
    train, val = split_indices(paths, labels, classes, val_fraction=val_fraction, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    for split, indices in (("train", train), ("val", val)):
        target = out / f"{split}.csv"
        if target.exists():
            raise BadSampleError(f"{target} exists: split into a new folder")
        frame.iloc[indices].to_csv(target, index=False)
    return {"train": len(train), "val": len(val)}
