"""The synthetic shapes dataset: written offline, deterministic, verified by a manifest.

Layout under ``<root>`` (default ``<repo>/data/shapes``)::

    manifest.json                 config + sha256 of every file below
    classes.txt                   one class name per line, in label order
    train/labels.csv              file_name,label   (the guide's annotations file, §2.2.1)
    train/images/img_00000.jpg    ...
    val/labels.csv, val/images/   the fixed validation split
    imagefolder/train/<class>/img_00000.jpg   the same bytes, ImageFolder layout (§2.3.1)
    imagefolder/val/<class>/...
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

from common.cli import option
from common.paths import default_data_root, display_path
from common.shapes import CLASSES, draw_shape_image

MANIFEST_VERSION = 2  # bump whenever drawing changes, so old datasets are regenerated
SPLITS = ("train", "val")


@dataclass(frozen=True)
class SyntheticConfig:
    """What to generate. Two equal configs produce byte-identical datasets.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """

    seed: int = option(0, "seed of every random choice")
    num_train: int = option(960, "training images")
    num_val: int = option(240, "validation images")
    min_size: int = option(200, "smallest side of an image (pixels)")
    max_size: int = option(400, "largest side of an image (pixels)")
    jpeg_quality: int = option(90, "JPEG quality (1-95)")

    def count(self, split: str) -> int:
        return {"train": self.num_train, "val": self.num_val}[split]


@dataclass(frozen=True)
class ShapesData:
    """Paths of a generated dataset; what notebooks pass to the Dataset classes.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """

    root: Path
    classes: tuple[str, ...] = CLASSES

    def labels_csv(self, split: str) -> Path:
        return self.root / split / "labels.csv"

    def images_dir(self, split: str) -> Path:
        return self.root / split / "images"

    def imagefolder_dir(self, split: str) -> Path:
        return self.root / "imagefolder" / split


def _labels_for(config: SyntheticConfig, split: str) -> np.ndarray:
    """Balanced labels in a seeded random order."""
    n = config.count(split)
    rng = np.random.default_rng([config.seed, SPLITS.index(split), 999_999])
    return rng.permutation(np.arange(n) % len(CLASSES))


def _jpeg_bytes(config: SyntheticConfig, split: str, index: int, label: int) -> bytes:
    rng = np.random.default_rng([config.seed, SPLITS.index(split), index])
    image = draw_shape_image(int(label), rng, min_size=config.min_size, max_size=config.max_size)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=config.jpeg_quality)
    return buffer.getvalue()


def _write_split(tmp: Path, config: SyntheticConfig, split: str, hashes: dict[str, str]) -> None:
    images = tmp / split / "images"
    images.mkdir(parents=True)
    rows = ["file_name,label"]
    for index, label in enumerate(_labels_for(config, split)):
        name = f"img_{index:05d}.jpg"
        data = _jpeg_bytes(config, split, index, int(label))
        class_dir = tmp / "imagefolder" / split / CLASSES[label]
        class_dir.mkdir(parents=True, exist_ok=True)
        for path in (images / name, class_dir / name):
            path.write_bytes(data)
            hashes[path.relative_to(tmp).as_posix()] = hashlib.sha256(data).hexdigest()
        rows.append(f"{name},{label}")
    csv = tmp / split / "labels.csv"
    csv.write_text("\n".join(rows) + "\n")
    hashes[csv.relative_to(tmp).as_posix()] = hashlib.sha256(csv.read_bytes()).hexdigest()


def generate(root: Path, config: SyntheticConfig = SyntheticConfig()) -> ShapesData:
    """Write the dataset to ``root``, replacing whatever is there, atomically.

    Files are written to a sibling temporary folder which is renamed into place at the
    end, so an interrupted run never leaves a half-written dataset behind ``root``.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    root = Path(root)
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    hashes: dict[str, str] = {}
    (tmp / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    hashes["classes.txt"] = hashlib.sha256((tmp / "classes.txt").read_bytes()).hexdigest()
    for split in SPLITS:
        _write_split(tmp, config, split, hashes)
    manifest = {"version": MANIFEST_VERSION, "config": asdict(config), "files": hashes}
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)
    return ShapesData(root)


def verify(root: Path, config: SyntheticConfig = SyntheticConfig()) -> list[str]:
    """List every problem with the dataset at ``root``; an empty list means intact.

    Checks the manifest's version and config, that every listed file exists with the
    recorded sha256, and that no unlisted file sits in the dataset folders.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    root = Path(root)
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        return [f"{manifest_path} is missing"]
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return [f"{manifest_path} is not valid JSON: {error}"]
    if manifest.get("version") != MANIFEST_VERSION or manifest.get("config") != asdict(config):
        return [f"{manifest_path} was written for another version or config"]
    problems = []
    files: dict[str, str] = manifest.get("files", {})
    for relpath, expected in files.items():
        path = root / relpath
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != expected:
            problems.append(f"{path} does not match its sha256 in the manifest")
    for path in sorted(root.rglob("*")):
        relpath = path.relative_to(root).as_posix()
        if path.is_file() and relpath != "manifest.json" and relpath not in files:
            problems.append(f"{path} is not in the manifest")
    return problems


def ensure_data(root: Path | None = None, config: SyntheticConfig = SyntheticConfig(), *,
                verbose: bool = True) -> ShapesData:
    """Make sure an intact dataset is at ``root``: check it, (re)generate it if needed.

    Safe to call from several processes at once (a file lock serialises them), and cheap
    when the data is already there, so every notebook starts with it.

    Args:
        root: Dataset folder; default ``default_data_root() / "shapes"``.
        config: What the dataset should contain.
        verbose: Print one line saying what was found or done.

    Returns:
        The dataset's paths.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    root = Path(root) if root is not None else default_data_root() / "shapes"
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(root.parent / f".{root.name}.lock"):
        problems = verify(root, config)
        if problems:
            if verbose and root.exists():
                print(f"Regenerating {display_path(root)}: {problems[0]}"
                      + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""))
            generate(root, config)
        elif verbose:
            print(f"Synthetic data OK at {display_path(root)}")
    return ShapesData(root)
