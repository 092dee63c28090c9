"""Your images in every trainer: the dataset layouts ``--data`` and the CSV flags accept.

Three layouts on disk, one object for the trainers (:class:`ImageData`)::

    shapes       DIR/train/labels.csv + DIR/train/images/, DIR/val/ alike (common.ensure_data;
                 any folder laid out so): class names from DIR/classes.txt, else the labels
    imagefolder  DIR/train/<class>/<image>, DIR/val/<class>/<image> (pytorch/examples imagenet):
                 the classes are train/'s sorted folder names, read by torchvision's ImageFolder
    csv          the guide's annotations CSV (file_name,label; §2.2.1) and its image folder, per
                 split: --train-csv, --train-images, --val-csv, --val-images

``--data DIR`` is told apart by what DIR holds (:func:`layout_of`). A CSV's labels are either
integers ``0..K-1``, used as given, or names, numbered in sorted order; the validation split
uses the training split's classes. Every image is decoded to RGB whatever its mode or size
(``common.data.load_rgb``, which names the file it cannot read); the trainers' transforms then
resize it. Refused, with the file named: one class, an empty split, integer labels with gaps,
validation classes the training split lacks. Shards (Chapter 5) are ``common.shards.train``'s.
No torchvision at import: only the ImageFolder layout loads it, when it is read.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from common.annotations import CSV_FLAGS, BadSampleError, read_annotations
from common.data import CustomImageDataset, load_rgb
from common.digests import file_sha256
from common.images.listing import FolderListing, list_folder, system_entry
from common.images.pixels import squared
from common.synthetic import ShapesData, ensure_data

if TYPE_CHECKING:  # pandas is imported where a CSV is read (common.annotations)
    import pandas as pd

LAYOUTS = ("shapes", "imagefolder", "csv")
SPLITS = ("train", "val")
EXPECTED = ("the shapes layout (train/labels.csv and train/images/, val/ alike: what "
            "common.ensure_data writes) or an ImageFolder root (train/<class>/<image> and "
            "val/<class>/<image>); for an annotations CSV per split use --train-csv, "
            "--train-images, --val-csv and --val-images instead of --data")


class DataLayoutError(BadSampleError):
    """Data the trainers cannot use as it is laid out; the message names the folder or file.

    Introduced in docs/scripts.md ("Your own images").
    """


@dataclass(frozen=True)
class SplitFiles:
    """Where one split lives: its image folder, its annotations CSV (``None``: ImageFolder), and
    the flag that named it (for messages and for the run's data identity).

    Introduced in docs/scripts.md ("Your own images").
    """

    images: Path
    csv: Path | None
    flag: str


@dataclass(frozen=True)
class ImageData:
    """A dataset on disk in one of ``LAYOUTS``: its classes, its two splits, where caches go.

    ``named_labels``: the CSV labels are class names (else integers ``0..K-1``).

    Each split is read from disk once (one listing of its folder, one parse of its CSV) and
    kept in ``read_once``, which ``dataset`` reuses with any transform and which copies of
    this object (``dataclasses.replace``: other pixels, another cache) share.

    Introduced in docs/scripts.md ("Your own images").
    """

    kind: str
    classes: tuple[str, ...]
    train: SplitFiles
    val: SplitFiles
    cache_root: Path
    named_labels: bool = False
    orientation: str = "exif"
    resize: str = "crop"
    #: An ImageFolder's record of the images its listings found (``common.images.listing``'s
    #: ``KnownImages``: ``known_images_<split>.json``), so that an unchanged file is not opened
    #: again to decide whether it is an image; ``None``: every listing opens every file.
    known_images: Path | None = field(default=None, compare=False)
    #: Per split: its ``FolderListing`` (ImageFolder) or its ``CustomImageDataset`` (a CSV,
    #: without transform); ``"<split> annotations"``: a CSV already parsed for its classes.
    read_once: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def pixels(self) -> dict[str, str]:
        """The decoders' settings that are not the defaults (``common.images.pixels``)."""
        return {name: value for name, value, default in (
            ("orientation", self.orientation, "exif"), ("resize", self.resize, "crop"))
            if value != default}

    def split(self, name: str) -> SplitFiles:
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return self.train if name == "train" else self.val

    def file_list(self, split: str) -> FileList:
        """``file_list(self.dataset(split))``, made once per split and pixels (``read_once``):
        the statistics and the run's identity read the same one."""
        key = f"{split} file list {sorted(self.pixels.items())}"
        if key not in self.read_once:
            self.read_once[key] = file_list(self.dataset(split))
        return self.read_once[key]

    def known_images_file(self, split: str) -> Path | None:
        """Where the listing of ``split`` keeps the images it found (``known_images``)."""
        return None if self.known_images is None else \
            self.known_images / f"known_images_{split}.json"

    def subset(self, length: int, count: int) -> Sequence[int]:
        """Which ``count`` of a split's ``length`` samples ``--subset`` keeps (0: all): the first
        ones of a CSV; an ImageFolder's spread evenly over its class-by-class order, so that
        every class keeps its share."""
        if not count or count >= length:
            return range(length)
        if self.train.csv is not None:
            return range(count)
        return [index * length // count for index in range(count)]

    @property
    def subset_name(self) -> str:
        return "first" if self.train.csv is not None else "spread"

    def dataset(self, split: str, transform: Callable | None = None):
        """The split as a Dataset of ``(image, label)``: ``CustomImageDataset`` or ``ImageFolder``.

        The split's folder is listed, or its CSV parsed and checked, on the first call only
        (``read_once``); each call returns a dataset of its own with ``transform``.
        """
        files = self.split(split)
        if files.csv is None:
            if split not in self.read_once:
                self.read_once[split] = list_folder(files.images, classes=self.classes,
                                                    known=self.known_images_file(split))
            return image_folder(files.images, transform, classes=self.classes,
                                listing=self.read_once[split], **self.pixels)
        if split not in self.read_once:
            frame = self.read_once.pop(f"{split} annotations", None)
            size = {"classes": self.classes} if self.named_labels else {
                "num_classes": len(self.classes)}
            self.read_once[split] = CustomImageDataset(files.csv, files.images, annotations=frame,
                                                       **size)
        dataset = copy.copy(self.read_once[split])  # the index arrays shared, read-only
        dataset.transform, dataset.pixels = transform, self.pixels
        return dataset


def layout_of(root: Path) -> str:
    """``"shapes"`` or ``"imagefolder"``: what the folder ``root`` holds, from its contents.

    Raises:
        DataLayoutError: Saying what was expected and what ``root`` holds.

    Introduced in docs/scripts.md ("Your own images").
    """
    if (root / "train" / "labels.csv").is_file():
        missing = [part for part in ("train/images", "val/labels.csv", "val/images")
                   if not (root / part).exists()]
        if missing:
            raise DataLayoutError(f"{root} holds train/labels.csv but no {', '.join(missing)}: "
                                  f"expected {EXPECTED}")
        return "shapes"
    if _class_folders(root / "train"):
        if not (root / "val").is_dir():
            raise DataLayoutError(f"{root}: an ImageFolder root needs val/ beside train/ "
                                  f"(val/<class>/<image>)")
        return "imagefolder"
    found = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in os.scandir(root))
    shown = ", ".join(found[:8]) + (", ..." if len(found) > 8 else "") if found else "nothing"
    raise DataLayoutError(f"{root} is in no layout the trainers read: expected {EXPECTED}; it "
                          f"holds {shown}")


def _class_folders(folder: Path) -> list[str]:
    """The class names of ``folder`` (NFC, sorted; system and hidden folders left out)."""
    if not folder.is_dir():
        return []
    return sorted({unicodedata.normalize("NFC", entry.name) for entry in os.scandir(folder)
                   if system_entry(entry.name) is None and entry.is_dir()})


def resolve_data(config) -> ImageData:
    """The data a trainer's ``config`` names: ``--data DIR``, the CSV flags, or the shapes.

    Raises:
        DataLayoutError: For a folder in no layout, one class, an empty split, bad labels.

    Introduced in docs/scripts.md ("Your own images").
    """
    if getattr(config, "train_csv", ""):
        data = csv_data(*(Path(getattr(config, name)) for name in CSV_FLAGS))
    elif not config.data:
        data = as_image_data(ensure_data(verbose=False))
    elif layout_of(Path(config.data)) == "shapes":
        data = shapes_data(Path(config.data))
    else:
        data = folder_data(Path(config.data))
    data = dataclasses.replace(data, orientation=getattr(config, "orientation", "exif"),
                               resize=getattr(config, "resize", "crop"))
    if data.pixels:  # a cache of its own: other pixels
        suffix = "-".join(data.pixels.values())
        data = dataclasses.replace(data, cache_root=data.cache_root.with_name(
            f"{data.cache_root.name}-{suffix}"))
    return data


def as_image_data(data: ShapesData | ImageData) -> ImageData:
    """``data`` as an :class:`ImageData` (a ``ShapesData`` from ``common.ensure_data`` is one).

    Introduced in docs/scripts.md ("Your own images").
    """
    if isinstance(data, ImageData):
        return data
    root = Path(data.root)
    return ImageData("shapes", tuple(data.classes), _in_folder(root, "train"),
                     _in_folder(root, "val"), root.parent / "cache")


def _in_folder(root: Path, split: str) -> SplitFiles:
    return SplitFiles(root / split / "images", root / split / "labels.csv", f"--data {split}/")


def shapes_data(root: Path) -> ImageData:
    """A folder in the shapes layout; its classes from ``classes.txt``, else from the labels.

    Introduced in docs/scripts.md ("Your own images").
    """
    names = root / "classes.txt"
    if names.is_file():
        classes = tuple(line.strip() for line in names.read_text().splitlines() if line.strip())
        at_least_two_classes(classes, names)
        return as_image_data(ShapesData(root, classes))
    frame = read_annotations(root / "train" / "labels.csv")
    classes, named = csv_classes(root / "train" / "labels.csv", frame)
    return ImageData("shapes", classes, _in_folder(root, "train"), _in_folder(root, "val"),
                     root.parent / "cache", named, read_once={"train annotations": frame})


def csv_data(train_csv: Path, train_images: Path, val_csv: Path, val_images: Path) -> ImageData:
    """The guide's layout: an annotations CSV and an image folder for each split.

    Introduced in docs/scripts.md ("Your own images").
    """
    frame = read_annotations(train_csv)
    classes, named = csv_classes(train_csv, frame)
    cache = train_csv.parent / "cache" / f"{train_csv.stem}-csv"
    return ImageData("csv", classes, SplitFiles(train_images, train_csv, "--train-csv"),
                     SplitFiles(val_images, val_csv, "--val-csv"), cache, named,
                     read_once={"train annotations": frame})


def folder_data(root: Path, *, remember: bool = True) -> ImageData:
    """An ImageFolder root: ``train/`` and ``val/`` of class folders; classes from ``train/``.

    ``remember``: keep the images each listing found in the cache folder
    (``root/../cache/<name>-imagefolder/known_images_<split>.json``), so that the next run
    opens only the files that changed (``ImageData.known_images``); ``False`` writes nothing
    there (``make_shards.py --imagefolder`` writes only to its ``--out``).

    Introduced in docs/scripts.md ("Your own images").
    """
    cache = root.parent / "cache" / f"{root.name}-imagefolder"
    known = cache if remember else None
    listing = list_folder(root / "train", known=known and known / "known_images_train.json")
    at_least_two_classes(listing.refuse().classes, root / "train")
    return ImageData("imagefolder", listing.classes,
                     SplitFiles(root / "train", None, "--data train/"),
                     SplitFiles(root / "val", None, "--data val/"), cache,
                     known_images=known, read_once={"train": listing})


def at_least_two_classes(classes: tuple[str, ...], where: Path) -> None:
    """Refuse a dataset of fewer than 2 classes, naming ``where`` (its folder or CSV).

    Introduced in docs/scripts.md ("Your own images").
    """
    if len(classes) < 2:
        raise DataLayoutError(f"{where}: {len(classes)} class(es) {list(classes)}; a classifier "
                              "needs at least 2")


def csv_classes(csv: Path, frame: pd.DataFrame | None = None) -> tuple[tuple[str, ...], bool]:
    """The classes of an annotations CSV's labels, and whether the labels are names.

    Integer labels must be ``0..K-1`` (each used by some row); names are numbered in sorted order.
    ``frame``: the CSV as ``read_annotations`` returned it, if already read.

    Introduced in docs/scripts.md ("Your own images").
    """
    labels = (read_annotations(csv) if frame is None else frame).iloc[:, 1].str.strip()
    if labels.str.fullmatch(r"[+-]?\d+").all():
        values = sorted({int(value) for value in labels})
        if values != list(range(len(values))):
            gaps = sorted(set(range(max(values[-1] + 1, 0))) - set(values))[:5]
            raise DataLayoutError(f"{csv}: integer labels must be 0..K-1 for K classes; found "
                                  f"{values[:10]}" + (f" (no row has {gaps})" if gaps else "")
                                  + "; or write the labels as class names")
        classes, named = tuple(str(value) for value in values), False
    else:
        classes, named = tuple(sorted(set(labels))), True
    at_least_two_classes(classes, csv)
    return classes, named


def image_folder(root: Path, transform: Callable | None = None, *,
                 classes: tuple[str, ...] | None = None, orientation: str = "exif",
                 resize: str = "crop", listing: FolderListing | None = None):
    """torchvision's ``ImageFolder`` over ``root``, its samples from ``common.images.listing``
    (system files skipped, files decided by content, each once), read with ``load_rgb``
    (errors name the file; EXIF ``orientation`` applied unless ``"raw"``).

    Args:
        classes: The training split's classes: ``root``'s folders must be among them, and its
            labels are numbered by them (a validation split may lack a class).
        listing: ``list_folder(root, classes=classes)`` if already made.

    Raises:
        FolderError: Naming every file or folder the listing refuses.

    Introduced in docs/scripts.md ("Your own images").
    """
    from torchvision.datasets import ImageFolder, VisionDataset  # the ImageFolder layout only

    listing = (listing or list_folder(root, classes=classes)).refuse()
    if not listing.samples:
        raise DataLayoutError(f"{root} holds no class folders with images (expected "
                              f"{root}/<class>/<image>)")
    dataset = ImageFolder.__new__(ImageFolder)  # a plain ImageFolder (picklable), listed by us
    VisionDataset.__init__(dataset, os.fspath(root), transform=transform)
    dataset.pixels = {name: value for name, value, default in (
        ("orientation", orientation, "exif"), ("resize", resize, "crop")) if value != default}
    dataset.loader = PixelLoader(**dataset.pixels) if dataset.pixels else load_rgb
    dataset.extensions = None
    dataset.classes = list(listing.classes)
    dataset.class_to_idx = {name: i for i, name in enumerate(listing.classes)}
    dataset.samples = list(listing.samples)
    dataset.imgs, dataset.targets = dataset.samples, [label for _, label in listing.samples]
    dataset.listing = listing
    return dataset


class PixelLoader:
    """``load_rgb`` with ``orientation``, then ``squared`` by ``resize``: an ImageFolder's loader
    for the trainers' ``--orientation raw`` and ``--resize squash|pad`` (a class: picklable).

    Introduced in docs/scripts.md ("Your own images").
    """

    def __init__(self, *, orientation: str = "exif", resize: str = "crop") -> None:
        self.orientation, self.resize = orientation, resize

    def __call__(self, path: str):
        return squared(load_rgb(path, orientation=self.orientation), self.resize)


@dataclass(frozen=True)
class FileList:
    """What a split reads: image paths and labels, and the listing whose sha256 names them.

    The listing is the annotations file's bytes (``csv``) followed by ``extra``: a CSV's class
    names when its labels are names; for an ImageFolder, the layout and every path with its
    label. A cache or a snapshot of other files, or of other classes, is so told apart.

    Introduced in docs/scripts.md ("Your own images").
    """

    name: str
    where: str
    paths: np.ndarray
    labels: np.ndarray
    csv: Path | None = None
    extra: bytes = b""

    @property
    def listing(self) -> bytes:
        return (self.csv.read_bytes() if self.csv is not None else b"") + self.extra

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.listing).hexdigest()


def file_list(dataset) -> FileList:
    """The :class:`FileList` of a ``CustomImageDataset`` or an ``ImageFolder``.

    Introduced in docs/scripts.md ("Your own images").
    """
    if isinstance(dataset, CustomImageDataset):
        csv = dataset.annotations_file
        extra = (b"\0classes\0" + "\n".join(dataset.classes).encode()
                 if dataset.classes is not None else b"") + _pixels_bytes(dataset)
        # The dataset's own string array: 15,360 pathlib.Path objects cost more than the stats.
        return FileList(f"annotations file {csv.name}", str(csv), dataset.paths,
                        dataset.labels, csv, extra)
    root = Path(dataset.root)
    rows = [f"{_relative(path, root)}\t{label}" for path, label in dataset.samples]
    return FileList(f"file list of {root.name}/", str(root),
                    np.array([path for path, _ in dataset.samples], dtype=np.str_),
                    np.array(dataset.targets, dtype=np.int64),
                    extra="\n".join(["imagefolder", *rows, "classes", *dataset.classes]).encode()
                    + _pixels_bytes(dataset))


def _relative(path: str, root: Path) -> str:
    """``os.path.relpath(path, root)``, without its cost where ``path`` starts with ``root/``."""
    prefix = os.path.join(os.fspath(root), "")
    return path[len(prefix):] if path.startswith(prefix) and ".." not in path \
        else os.path.relpath(path, root)


def _pixels_bytes(dataset) -> bytes:
    pixels = getattr(dataset, "pixels", {})
    return (b"\0pixels\0" + repr(sorted(pixels.items())).encode()) if pixels else b""


def class_identity(classes: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``{"classes": "cat, dog, fish"}``: the class list a snapshot or checkpoint records.

    Introduced in docs/scripts.md ("Your own images").
    """
    return {"classes": ", ".join(classes)}


def data_identity(data: ImageData) -> dict[str, str]:
    """What a run's data is, ``{name: value}``, for ``common.ddp.snapshot.check_identity``.

    The class list, and each split's annotations CSV (sha256 of its bytes) or ImageFolder
    file list (sha256 of every path and label).

    Introduced in docs/scripts.md ("Your own images").
    """
    identity = class_identity(data.classes)
    for split in SPLITS:
        files = data.split(split)
        if files.csv is None:
            identity[f"{files.flag} (file list)"] = data.file_list(split).sha256
        elif data.kind == "shapes":
            identity[f"--data {split}/labels.csv"] = file_sha256(files.csv)
        else:
            identity[f"{files.flag} {files.csv.name}"] = file_sha256(files.csv)
    return identity

