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

import ctypes
import hashlib
import io
import json
import os
import re
import shutil
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from common.cli import option
from common.paths import default_data_root, display_path
from common.shapes import CLASSES, draw_shape_image

if TYPE_CHECKING:  # filelock is imported where data is generated
    from filelock import FileLock

MANIFEST_VERSION = 2  # bump whenever drawing changes, so old datasets are regenerated
SPLITS = ("train", "val")
#: The hint of every command line whose data folder holds no labels.csv.
MAKE_DATA = "make one with python -m common.tools.make_data --root DIR"


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


def _target(root: Path) -> Path:
    # A symbolic link `data/shapes -> elsewhere` is kept: the dataset is swapped at its target.
    return root.resolve() if root.is_symlink() else root


def _lock(root: Path) -> FileLock:
    from filelock import FileLock  # only where data is generated

    target = _target(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(target.parent / f".{target.name}.lock")


def _exchange(new: Path, target: Path) -> bool:
    """Swap two folders in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    if sys.platform != "linux":
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(target),
                     rename_exchange) == 0


def _swap_in(new: Path, target: Path) -> None:
    # Readers see the old complete dataset or the new one, never a mix or nothing: where the
    # exchange is unsupported, `target` is missing only between two renames.
    if not target.exists():
        os.replace(new, target)
    elif not _exchange(new, target):  # after an exchange `new` holds the old dataset
        old = target.with_name(target.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(new, target)
        shutil.rmtree(old)


_GENERATED = re.compile(r"(manifest\.json|classes\.txt|(train|val)/labels\.csv|"
                        r"(train|val)/images/img_\d{5}\.jpg|imagefolder/(train|val)/\w+/img_\d{5}\.jpg)")


def _keep_strays(old: Path, new: Path, generated: dict[str, str]) -> list[str]:
    """Link every file of `old` that the generator did not write into `new` (left alone)."""
    listed = _manifest_files(old)
    kept = []
    for path in sorted(old.rglob("*")) if old.is_dir() else []:
        relpath = path.relative_to(old).as_posix()
        if not path.is_file() or relpath in generated or relpath in listed \
                or _GENERATED.fullmatch(relpath):
            continue
        (new / relpath).parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, new / relpath)
        except OSError:
            shutil.copy2(path, new / relpath)
        kept.append(relpath)
    return kept


def generate(root: Path, config: SyntheticConfig = SyntheticConfig()) -> ShapesData:
    """Write the dataset to ``root``, replacing the generator's files there, atomically.

    Takes the same file lock as ``ensure_data``, so two runs (two ``--force``) serialize.
    Files are written to a sibling temporary folder that is then swapped with ``root`` in
    one step (Linux; elsewhere two renames), so a reader never sees a half-written
    dataset: a file it already opened keeps the old bytes until closed, and every path it
    opens afterwards is in the new dataset (the same bytes for the same config). Files in
    ``root`` that the generator did not write are carried over untouched (and warned about
    by ``ensure_data``). If ``root`` is a symbolic link, its target is replaced.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    root = Path(root)
    with _lock(root):
        _generate(_target(root), config)
    return ShapesData(root)


def _generate(target: Path, config: SyntheticConfig) -> None:
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a killed run (we hold the lock)
    try:
        tmp.mkdir(parents=True)
        hashes: dict[str, str] = {}
        (tmp / "classes.txt").write_text("\n".join(CLASSES) + "\n")
        hashes["classes.txt"] = hashlib.sha256((tmp / "classes.txt").read_bytes()).hexdigest()
        for split in SPLITS:
            _write_split(tmp, config, split, hashes)
        manifest = {"version": MANIFEST_VERSION, "config": asdict(config), "files": hashes}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        _keep_strays(target, tmp, hashes)
        _swap_in(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _manifest_files(root: Path) -> dict[str, str]:
    try:
        files = json.loads((root / "manifest.json").read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


#: The folder of ``root`` where the trainers cache the ImageFolder and CSV views (not strays).
CACHES = "cache"


def inspect_data(root: Path, config: SyntheticConfig = SyntheticConfig()
                 ) -> tuple[list[str], list[Path]]:
    """``(problems, strays)`` of the dataset at ``root``.

    ``problems`` (regenerate if any): a missing, damaged or outdated manifest, a listed
    file missing or not matching its sha256. ``strays``: files the manifest does not list
    (not the generator's: left alone, but a folder listing such as ``ImageFolder`` sees them),
    except under ``root / CACHES``, where the trainers keep the caches and statistics of the
    ImageFolder and CSV views (``common.images.layouts``: beside the view, as for any folder).

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    root = Path(root)
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        return [f"{manifest_path} is missing"], []
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return [f"{manifest_path} is not valid JSON: {error}"], []
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return [f"{manifest_path} is damaged (not an object with a 'files' mapping)"], []
    if manifest.get("version") != MANIFEST_VERSION or manifest.get("config") != asdict(config):
        return [f"{manifest_path} was written for another version or config"], []
    problems = []
    for relpath, expected in files.items():
        path = root / relpath
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != expected:
            problems.append(f"{path} does not match its sha256 in the manifest")
    strays = [path for path in sorted(root.rglob("*")) if path.is_file()
              and path.relative_to(root).as_posix() not in files
              and path.relative_to(root).as_posix() != "manifest.json"
              and path.relative_to(root).parts[0] != CACHES]
    return problems, strays


def verify(root: Path, config: SyntheticConfig = SyntheticConfig()) -> list[str]:
    """List every problem with the dataset at ``root``; an empty list means intact.

    Checks the manifest's version and config, that every listed file exists with the
    recorded sha256, and that no unlisted file sits in the dataset folders.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    problems, strays = inspect_data(root, config)
    return problems + [f"{path} is not in the manifest" for path in strays]


def ensure_data(root: Path | None = None, config: SyntheticConfig = SyntheticConfig(), *,
                verbose: bool = True) -> ShapesData:
    """Make sure an intact dataset is at ``root``: check it, (re)generate it if needed.

    Safe to call from several processes at once (a file lock serialises them), and cheap
    when the data is already there, so every notebook starts with it. Files the generator
    did not write are warned about and left alone; they do not cause a regeneration.

    Args:
        root: Dataset folder; default ``default_data_root() / "shapes"``.
        config: What the dataset should contain.
        verbose: Print one line saying what was found or done.

    Returns:
        The dataset's paths.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    root = Path(root) if root is not None else default_data_root() / "shapes"
    with _lock(root):
        problems, strays = inspect_data(root, config)
        if strays:
            warnings.warn(f"{root}: {len(strays)} file(s) not written by the generator, left "
                          f"alone: {', '.join(str(p) for p in strays[:3])}"
                          + (" ..." if len(strays) > 3 else ""), stacklevel=2)
        if problems:
            if verbose and root.exists():
                print(f"Regenerating {display_path(root)}: {problems[0]}"
                      + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""))
            _generate(_target(root), config)
        elif verbose:
            print(f"Synthetic data OK at {display_path(root)}")
    return ShapesData(root)
