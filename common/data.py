"""The guide's datasets (§2.2.1 ``CustomImageDataset``, §2.3.1 ``CustomDataset``), hardened.

Both keep their index in NumPy arrays rather than lists of Python objects: a DataLoader
worker that reads a Python list touches every object's reference count, which copies
the pages holding them into the worker ("copy-on-read"), so each worker slowly grows to
the size of the whole index. One NumPy buffer has no per-item reference counts.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset

from common.annotations import (
    BadSampleError,
    check_duplicates,
    parse_label,
    read_annotations,
    resolve_inside,
)
from common.images.pixels import squared, viewer_rgb

if TYPE_CHECKING:  # pandas is imported where a CSV is read: an ImageFolder run never loads it
    import pandas as pd

__all__ = ["BadSampleError", "CustomDataset", "CustomImageDataset", "DECODE_ERRORS", "check_pixels",
           "decode_errors", "describe_image", "load_rgb", "open_image", "parse_label",
           "readonly_view", "resolve_inside"]



def readonly_view(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that refuses writes (hand out an index without letting callers change it).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    view = array.view()
    view.flags.writeable = False
    return view


def load_rgb(path: str | os.PathLike, *, where: str = "",
             max_pixels: int | None = None, orientation: str = "exif") -> Image.Image:
    """Open an image file and decode it fully as RGB, naming the file on failure.

    The pixels are the ones a viewer shows (``common.images.pixels.viewer_rgb``): EXIF
    orientation applied (``orientation="raw"`` keeps the stored one), 16-bit and float images
    scaled to 8 bits, transparency composited on white.

    Args:
        path: Image file.
        where: Extra context for the error message, e.g. ``"labels.csv line 7"``.
        max_pixels: Refuse images with more pixels than this (see ``open_image``).
        orientation: ``"exif"`` (default) or ``"raw"``.

    Raises:
        BadSampleError: If the file is missing, not an image, truncated or too large.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    path = Path(path)  # a NumPy string would show as np.str_('...') in PIL's message
    with decode_errors(describe_image(path, where)):
        with open_image(path, max_pixels=max_pixels) as image:
            return viewer_rgb(image, orientation=orientation, copy=False)  # the full decode


#: What PIL (OSError, UnidentifiedImageError, SyntaxError, ValueError, DecompressionBombError)
#: and torchvision.io (RuntimeError) raise for a missing, corrupt, truncated or huge image.
DECODE_ERRORS = (OSError, UnidentifiedImageError, SyntaxError, ValueError, RuntimeError,
                 Image.DecompressionBombError)


def describe_image(path: str | os.PathLike, where: str = "") -> str:
    """``"cannot decode image a.jpg (labels.csv line 7)"``: the start of every decode error.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    return f"cannot decode image {path}" + (f" ({where})" if where else "")


def check_pixels(size: tuple[int, int], max_pixels: int | None = None) -> None:
    """Refuse an image of ``size = (width, height)`` with more than ``max_pixels`` pixels.

    ``max_pixels=None`` means PIL's own limit, ``PIL.Image.MAX_IMAGE_PIXELS`` (89,478,485
    pixels by default, about 268 MB once decoded as RGB), read at each call; PIL only warns
    above it, this refuses. ``PIL.Image.MAX_IMAGE_PIXELS = None`` and no ``max_pixels``
    turn the check off. Call it on the header's size, before decoding any pixel.

    Raises:
        ValueError: Saying the size, the limit and how to raise it.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    limit = Image.MAX_IMAGE_PIXELS if max_pixels is None else max_pixels
    width, height = size
    if limit is not None and width * height > limit:
        raise ValueError(f"{width}x{height} = {width * height:,} pixels is over the limit of "
                         f"{limit:,} (a decompression bomb, or a real image that large: pass "
                         "max_pixels=... to the dataset, or raise PIL.Image.MAX_IMAGE_PIXELS)")


@contextmanager
def open_image(source, *, max_pixels: int | None = None) -> Iterator[Image.Image]:
    """``Image.open`` (lazy: the header only) and ``check_pixels`` before anything is decoded.

    PIL's own warning for large images is silenced here because ``check_pixels`` decides;
    images over twice ``PIL.Image.MAX_IMAGE_PIXELS`` still raise PIL's
    ``DecompressionBombError`` inside ``Image.open`` (``decode_errors`` names the file).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image = Image.open(source)
    with image:
        check_pixels(image.size, max_pixels)
        yield image


@contextmanager
def decode_errors(message: str, error_type: type[Exception] = BadSampleError) -> Iterator[None]:
    """Turn any decoding error inside the block into ``error_type(f"{message}: {error}")``.

    The one place that says which library errors mean "this image is broken", for the
    datasets of chapter 2, the fast decoders of chapter 3 and the shard reader of chapter 5.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    try:
        yield
    except DECODE_ERRORS as error:
        if isinstance(error, error_type):
            raise
        hint = (" (raise PIL.Image.MAX_IMAGE_PIXELS to accept it)"
                if isinstance(error, Image.DecompressionBombError) else "")
        raise error_type(f"{message}: {error}{hint}") from error


class CustomImageDataset(Dataset):
    """Images listed in an annotations CSV (guide §2.2.1), validated at construction.

    The CSV has a header line, then one line per image: a path relative to ``img_dir``
    and an integer label. ``__getitem__`` returns ``(image, label)``: a PIL RGB image
    (or whatever ``transform`` makes of it) and an ``int`` (or ``target_transform(int)``).

    Args:
        annotations_file: The CSV.
        img_dir: Folder the CSV's paths are relative to; nothing outside it is read.
        transform: Applied to the PIL image.
        target_transform: Applied to the integer label.
        num_classes: If given, every label must lie in ``0 .. num_classes - 1``.
        classes: If given, the labels are these class names, numbered by their position
            (``common.images.layouts``: a CSV written with names instead of integers).
        on_bad: ``"raise"`` (default) stops at the first bad row; ``"skip"`` leaves bad
            rows out, lists them in ``self.skipped`` and warns with their count.
        check_images: Also decode every image now (slower) so corrupt files are found at
            construction rather than in the middle of an epoch.
        max_pixels: Refuse images with more pixels (default ``PIL.Image.MAX_IMAGE_PIXELS``;
            see ``check_pixels``).
        annotations: ``annotations_file`` as ``read_annotations`` returned it, if the caller
            has read it already (``common.images.layouts``: each CSV parsed once).

    A file listed on several lines with one label is kept once per line (oversampling) and
    reported in a warning and ``self.duplicates``; a file listed with two different labels
    is a bad row (with ``on_bad="skip"`` every row of that file is left out).

    Raises:
        BadSampleError: Naming the CSV line and file of the first problem (``on_bad="raise"``).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """

    #: ``{"orientation": ..., "resize": ...}`` when not the defaults (``common.images.layouts``:
    #: the trainers' ``--orientation raw`` and ``--resize squash|pad``).
    pixels: dict = {}

    def __init__(self, annotations_file: str | os.PathLike, img_dir: str | os.PathLike,
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 *, num_classes: int | None = None, on_bad: str = "raise",
                 check_images: bool = False, max_pixels: int | None = None,
                 classes: Sequence[str] | None = None,
                 annotations: pd.DataFrame | None = None) -> None:
        if on_bad not in ("raise", "skip"):
            raise ValueError(f"on_bad must be 'raise' or 'skip', got {on_bad!r}")
        self.annotations_file = Path(annotations_file)
        self.img_dir = Path(img_dir)
        if not self.img_dir.is_dir():
            raise FileNotFoundError(f"image folder {self.img_dir} does not exist")
        self.transform = transform
        self.target_transform = target_transform
        self.max_pixels = max_pixels
        self.classes = tuple(classes) if classes is not None else None
        self._class_index = {name: i for i, name in enumerate(self.classes or ())}
        frame = read_annotations(self.annotations_file) if annotations is None else annotations
        paths, labels, lines, skipped = [], [], [], []
        for row, (name, label) in enumerate(frame.itertuples(index=False, name=None)):
            where = f"{self.annotations_file.name} line {row + 2}"
            try:
                path, value = self._check_row(name, label, where, num_classes, check_images)
            except BadSampleError as error:
                if on_bad == "raise":
                    raise
                skipped.append((row + 2, name, str(error)))
                continue
            paths.append(str(path))
            labels.append(value)
            lines.append(row + 2)
        keep, self.duplicates = check_duplicates(self.annotations_file.name, frame, paths,
                                                  labels, lines, skipped, on_bad)
        paths, labels, lines = ([items[i] for i in keep] for items in (paths, labels, lines))
        skipped.sort()
        import pandas as pd  # already imported by read_annotations

        self.skipped = pd.DataFrame(skipped, columns=["line", "file_name", "reason"])
        if skipped:
            lines_skipped = ", ".join(str(line) for line, _, _ in skipped)
            warnings.warn(f"{self.annotations_file}: skipped {len(skipped)} bad row(s) at "
                          f"line(s) {lines_skipped}; reasons in .skipped; first: "
                          f"{skipped[0][2]}", stacklevel=2)
        if not paths:
            raise BadSampleError(f"{self.annotations_file}: no usable rows")
        self._paths = np.array(paths, dtype=np.str_)
        self._labels = np.array(labels, dtype=np.int64)
        self._lines = np.array(lines, dtype=np.int64)  # CSV line of each sample, for errors

    def _check_row(self, name: str, label: str, where: str, num_classes: int | None,
                   check_images: bool) -> tuple[Path, int]:
        path = resolve_inside(self.img_dir, name, where=where)
        if self.classes is None:
            value = parse_label(label, where=f"{where}: {name!r}", num_classes=num_classes)
        elif (value := self._class_index.get(label.strip())) is None:
            raise BadSampleError(f"{where}: {name!r}: label {label!r} is not a known class "
                                 f"(classes: {list(self.classes)})")
        if check_images:
            load_rgb(path, where=where, max_pixels=self.max_pixels)
        return path, value

    def __len__(self) -> int:
        return len(self._labels)

    @property
    def labels(self) -> np.ndarray:
        """All labels, in index order (a read-only view)."""
        return readonly_view(self._labels)

    @property
    def paths(self) -> np.ndarray:
        """All image files, in index order: one NumPy string array (a read-only view), which
        pickles to a DataLoader worker as one buffer rather than a list of objects."""
        return readonly_view(self._paths)

    @property
    def lines(self) -> np.ndarray:
        """The CSV line of each sample, in index order (a read-only view): what errors name."""
        return readonly_view(self._lines)

    def path(self, idx: int) -> Path:
        """The image file of sample ``idx``."""
        return Path(self._paths[idx])

    def __getitem__(self, idx: int):
        where = f"{self.annotations_file.name} line {self._lines[idx]}"
        image = load_rgb(self._paths[idx], where=where, max_pixels=self.max_pixels,
                         orientation=self.pixels.get("orientation", "exif"))
        if self.pixels.get("resize", "crop") != "crop":  # the trainers' --resize squash|pad
            image = squared(image, self.pixels["resize"])
        label = int(self._labels[idx])
        if self.transform:
            image = self.transform(image)
        if self.target_transform:
            label = self.target_transform(label)
        return image, label


class CustomDataset(Dataset):
    """A list of image files labelled by their parent folder (guide §2.3.1), completed.

    The guide leaves ``get_label`` unimplemented; here the label is the index of the
    parent folder's name among the sorted class names, exactly as torchvision's
    ``ImageFolder`` numbers classes. ``CustomDataset.from_folder(root)`` lists a folder with
    the one listing every path reads (``common.images.listing``): on a clean folder the same
    (path, label) pairs as ``ImageFolder(root)``; system and hidden entries and files that are
    not images skipped and said in one line, unusable files refused naming them.

    Args:
        file_list: Image paths.
        transform: Applied to the PIL image.
        classes: Class names; default the sorted set of the files' parent folder names.
        root: If given, every file must lie inside it (no ``..``, no links out).
        max_pixels: Refuse images with more pixels (default ``PIL.Image.MAX_IMAGE_PIXELS``).

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """

    def __init__(self, file_list: Sequence[str | os.PathLike], transform: Callable | None = None,
                 *, classes: Sequence[str] | None = None,
                 root: str | os.PathLike | None = None, max_pixels: int | None = None) -> None:
        if len(file_list) == 0:
            raise BadSampleError("file_list is empty")
        self.transform, self.max_pixels = transform, max_pixels
        self.root = Path(root) if root is not None else None
        checked = [self._check_file(Path(f), i) for i, f in enumerate(file_list)]
        names = sorted({p.parent.name for p in checked}) if classes is None else list(classes)
        self.classes = names
        self.class_to_idx = {name: i for i, name in enumerate(names)}
        self._paths = np.array([str(p) for p in checked], dtype=np.str_)
        self._labels = np.array([self.get_label(p) for p in checked], dtype=np.int64)

    @classmethod
    def from_folder(cls, root: str | os.PathLike,
                    transform: Callable | None = None) -> CustomDataset:
        """Every image under ``root/<class>/``, from ``common.images.listing.list_folder``.

        The classes and samples, in order, are ``ImageFolder``'s on a clean folder; what the
        listing skipped (``.ipynb_checkpoints``, ``__MACOSX``, a file that is not an image, ...)
        is printed in one line, and each label is the listing's (the class folder an image lies
        in, at any depth, its name NFC-normalized).

        Raises:
            FolderError: Naming every file or folder the listing refuses.

        Introduced in chapters/02_3_custom_datasets.ipynb.
        """
        from common.images.listing import list_folder  # Pillow only: no torchvision

        listing = list_folder(root).refuse()
        if listing.junk or listing.skipped:
            print(listing.summary())  # nothing left out without a word
        dataset = cls.__new__(cls)
        dataset._listed_labels = {os.fspath(Path(path)): label for path, label in listing.samples}
        dataset.__init__(list(dataset._listed_labels), transform, classes=listing.classes,
                         root=root)
        return dataset

    def _check_file(self, path: Path, index: int) -> Path:
        where = f"file_list[{index}]"
        if self.root is not None:
            relative = os.path.relpath(os.path.abspath(path), os.path.abspath(self.root))
            resolve_inside(self.root, relative, where=where)
        elif not path.is_file():
            raise BadSampleError(f"{where}: file {str(path)!r} not found")
        return path

    #: ``from_folder``'s labels by path (the listing's), set before ``__init__`` asks for them.
    _listed_labels: dict[str, int] | None = None

    def get_label(self, img_path: str | os.PathLike) -> int:
        """The class index of ``img_path``'s parent folder name (from ``from_folder``: the
        listing's label)."""
        if self._listed_labels is not None:
            return self._listed_labels[os.fspath(img_path)]
        name = Path(img_path).parent.name
        if name not in self.class_to_idx:
            raise BadSampleError(f"{img_path}: folder {name!r} is not a known class "
                                 f"(classes: {self.classes})")
        return self.class_to_idx[name]

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(path, label) pairs, comparable with ``ImageFolder(root).samples``."""
        return [(str(p), int(t)) for p, t in zip(self._paths, self._labels, strict=True)]

    @property
    def labels(self) -> np.ndarray:
        """All labels, in index order (a read-only view)."""
        return readonly_view(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, index: int):
        image = load_rgb(self._paths[index], where=f"file_list[{index}]",
                         max_pixels=self.max_pixels)
        label = int(self._labels[index])
        if self.transform:
            image = self.transform(image)
        return image, label
