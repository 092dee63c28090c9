"""Tiny real image datasets for the tests of ``common.images.layouts`` and the trainers on them.

Three classes, images of mixed sizes and modes (L and RGB as JPEG; RGBA and P as PNG, which JPEG
cannot hold), each class its own colour so that a model can tell them apart. Two layouts of the
same images: an ImageFolder root (``train/<class>/``, ``val/<class>/``) and the guide's
annotations CSVs (``train.csv``, ``val.csv`` with an ``images/`` folder).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

CLASSES = ("cat", "dog", "fish")
COLOURS = ((200, 40, 40), (40, 200, 40), (40, 40, 200))
MODES = ("L", "RGBA", "P", "RGB")


def write_image(path: Path, label: int, index: int) -> Path:
    """One image of class ``label``: its mode and size vary with ``index``."""
    mode = MODES[index % len(MODES)]
    image = Image.new("RGB", (24 + 9 * index, 20 + 5 * label), COLOURS[label]).convert(mode)
    path = path.with_suffix(".png" if mode in ("RGBA", "P") else ".jpg")
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path


def write_imagefolder(root: Path, *, train: int = 4, val: int = 2,
                      classes: tuple[str, ...] = CLASSES) -> Path:
    """``root/{train,val}/<class>/img_<i>.{jpg,png}``; returns ``root``."""
    for split, count in (("train", train), ("val", val)):
        for label, name in enumerate(classes):
            for index in range(count):
                write_image(root / split / name / f"img_{index}", label, index)
    return root


def write_csv_layout(root: Path, *, named: bool = True, train: int = 4, val: int = 2) -> Path:
    """``root/images/``, ``root/train.csv`` and ``root/val.csv`` (labels as names or integers)."""
    for split, count in (("train", train), ("val", val)):
        rows = ["file_name,label"]
        for label, name in enumerate(CLASSES):
            for index in range(count):
                path = write_image(root / "images" / split / f"{name}_{index}", label, index)
                rows.append(f"{path.relative_to(root / 'images').as_posix()},"
                            f"{name if named else label}")
        (root / f"{split}.csv").write_text("\n".join(rows) + "\n")
    return root


def csv_flags(root: Path) -> list[str]:
    """The four flags of the guide's layout for ``write_csv_layout(root)``."""
    return ["--train-csv", str(root / "train.csv"), "--train-images", str(root / "images"),
            "--val-csv", str(root / "val.csv"), "--val-images", str(root / "images")]


# ---------------------------------------------------------------- a messy folder, as users have them
# Written by the library (chapter 7 makes the same one): common/images/examples.py.
from common.images.examples import (  # noqa: E402
    MESSY_CLASSES,
    truncated_jpeg,
    write_messy_folder,
    write_messy_split,
)

__all__ = ["CLASSES", "MESSY_CLASSES", "csv_flags", "truncated_jpeg", "write_csv_layout",
           "write_imagefolder", "write_messy_folder", "write_messy_split"]
