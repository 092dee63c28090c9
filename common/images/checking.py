"""A folder's report before any training: classes, counts, sizes, modes, every problem at once.

:func:`check_data` reads a dataset the way the trainers do (``common.images.listing`` for a folder
of class folders or an ImageFolder root with ``train/`` and ``val/``; the annotations CSV's rows
for the guide's layout), then decodes every image as the trainers will (``load_rgb``) and reads
every file's bytes once. It collects, without stopping at the first:

- the listing's refusals (a FIFO, a non-UTF-8 name, two class folders that are one, ...);
- images that cannot be decoded (truncated), and JPEGs libjpeg warns about (damaged data that
  Pillow decodes without a word: ``common.images.pixels.jpeg_warnings``);
- duplicates, by sha256 of the bytes: the same image in two classes or in both splits is a
  problem (a label that contradicts itself, a validation image the model trained on); twice in
  one class is listed as a note.

The entry point ``python -m common.images.check`` prints :meth:`CheckReport.table`,
the notes and the problems, and exits 1 when there is a problem.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from common.annotations import BadSampleError, read_annotations, resolve_inside
from common.images.listing import Entry, FolderListing, image_format, list_folder


@dataclass
class ClassRow:
    """One class of one split: how many images, their sizes, modes and formats.

    Introduced in docs/scripts.md ("Your own images").
    """

    split: str
    name: str
    count: int = 0
    sizes: list[tuple[int, int]] = field(default_factory=list)
    modes: Counter = field(default_factory=Counter)
    formats: Counter = field(default_factory=Counter)

    def cells(self) -> list[str]:
        widths = sorted(width for width, _ in self.sizes)
        heights = sorted(height for _, height in self.sizes)
        size = (f"{widths[0]}-{widths[-1]} x {heights[0]}-{heights[-1]}" if self.sizes else "-")
        return [self.split, self.name, str(self.count), size,
                ", ".join(f"{mode} {n}" for mode, n in self.modes.most_common()),
                ", ".join(f"{fmt} {n}" for fmt, n in self.formats.most_common())]


@dataclass
class CheckReport:
    """What :func:`check_data` found: a row per class and split, the listings' summaries, notes
    (skipped files, duplicates within a class) and problems (each naming its file).

    Introduced in docs/scripts.md ("Your own images").
    """

    rows: list[ClassRow] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def table(self) -> str:
        """The rows as an aligned text table."""
        header = ["split", "class", "images", "width x height", "modes", "formats"]
        lines = [header, *(row.cells() for row in self.rows)]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths,
                                                                           strict=True)).rstrip()
                         for line in lines)

    def verdict(self) -> str:
        """One line: how many images, problems and notes."""
        images = sum(row.count for row in self.rows)
        if self.ok:
            return f"ok: {images} images in {len({r.name for r in self.rows})} classes, " \
                   f"{len(self.notes)} note(s)"
        return f"{len(self.problems)} problem(s) in {images} images; first: {self.problems[0]}"


def _splits(root: Path) -> dict[str, FolderListing]:
    if (root / "train").is_dir() and (root / "val").is_dir():
        train = list_folder(root / "train")
        return {"train": train, "val": list_folder(root / "val", classes=train.classes)}
    return {"all": list_folder(root)}


def csv_listing(csv: Path, images: Path, classes: tuple[str, ...] | None = None) -> FolderListing:
    """The guide's layout as a listing: each row's file resolved inside ``images``, refused
    naming the line when it is missing, not a regular file, or not an image by content.
    ``classes``: the training split's (default: this CSV's, ``common.images.layouts.csv_classes``).

    Introduced in docs/scripts.md ("Your own images").
    """
    from common.images.layouts import csv_classes

    listing = FolderListing(csv)
    frame = read_annotations(csv)
    listing.classes = classes if classes is not None else csv_classes(csv)[0]
    index = {name: i for i, name in enumerate(listing.classes)}
    for row, (name, label) in enumerate(frame.itertuples(index=False, name=None)):
        where = f"{csv.name} line {row + 2}"
        label = label.strip()
        if label not in index:
            listing.problems.append(Entry(f"{csv}", f"{where}: label {label!r} is not a class "
                                                    f"of the training split"))
            continue
        try:
            path = resolve_inside(images, name, where=where)
        except BadSampleError as error:
            listing.problems.append(Entry(str(images / name), str(error)))
            continue
        fmt, why = image_format(path)
        if not fmt:
            listing.problems.append(Entry(str(path), f"{where}: {why}"))
            continue
        listing.samples.append((str(path), index[label]))
        listing.formats.append(fmt)
    return listing


def check_data(root: Path | None = None, *, csv_splits: dict[str, tuple[Path, Path]] | None = None,
               decode: bool = True) -> CheckReport:
    """Check a folder (``root``) or annotations CSVs (``{split: (csv, images)}``), all at once.

    ``decode=False`` only lists (what the trainers check before every run).

    Introduced in docs/scripts.md ("Your own images").
    """
    report = CheckReport()
    if root is not None:
        listings = _splits(root)
    else:
        listings, classes = {}, None
        for split, (csv, images) in csv_splits.items():
            listings[split] = csv_listing(csv, images, classes)
            classes = listings[split].classes
    owners: dict[str, list[tuple[str, str, str]]] = defaultdict(list)  # sha256 -> (split, class, path)
    for split, listing in listings.items():
        report.summaries.append(listing.summary())
        report.problems += [str(entry) for entry in listing.problems]
        report.notes += [f"skipped {entry}" for entry in listing.skipped]
        rows = {name: ClassRow(split, name) for name in listing.classes}
        for (path, label), fmt in zip(listing.samples, listing.formats, strict=True):
            row = rows[listing.classes[label]]
            row.count += 1
            row.formats[fmt] += 1
            if decode:
                _read(path, fmt, row, report, owners)
        report.rows += rows.values()
    _duplicates(owners, report)
    return report


def _read(path: str, fmt: str, row: ClassRow, report: CheckReport, owners: dict) -> None:
    from PIL import Image

    from common.data import load_rgb  # torch: only when a file is decoded
    from common.images.pixels import jpeg_warnings, shown_size

    try:
        data = Path(path).read_bytes()
        with Image.open(path) as image:
            row.sizes.append(shown_size(image))
            row.modes[image.mode] += 1
        load_rgb(path)
    except (OSError, BadSampleError) as error:
        report.problems.append(str(error) if isinstance(error, BadSampleError) else
                               f"{path}: cannot be read ({error})")
        return
    if fmt in ("JPEG", "MPO") and (said := jpeg_warnings(data)):
        report.problems.append(f"{path}: a damaged JPEG (libjpeg: {said}); it decodes, but "
                               "not as it was taken: replace it or delete it")
    owners[hashlib.sha256(data).hexdigest()].append((row.split, row.name, path))


def _duplicates(owners: dict, report: CheckReport) -> None:
    for copies in owners.values():
        if len(copies) < 2:
            continue
        listed = ", ".join(f"{os.path.basename(os.path.dirname(p))}/{os.path.basename(p)} "
                           f"({split})" for split, _, p in copies)
        if len({split for split, _, _ in copies}) > 1:
            report.problems.append(f"{copies[0][2]}: the same bytes in both splits ({listed}): "
                                   "a validation image the model trains on")
        elif len({name for _, name, _ in copies}) > 1:
            report.problems.append(f"{copies[0][2]}: the same bytes in two classes ({listed}): "
                                   "one image, two labels")
        else:
            report.notes.append(f"{copies[0][2]}: the same bytes {len(copies)} times in one "
                                f"class ({listed}): it weighs {len(copies)}x in training")
