"""The files of a uint8 cache folder (``common.fast.cache``) and the checks made before use.

What is checked, and when:

- **Opening** (``open_cache``, ``CachedImageDataset``, ``ensure_cache``) costs a few ``stat``
  calls per file, never a re-hash: the manifest must parse and match its own digest (an
  edited or cut manifest), ``images.u8``, ``labels.npy`` and ``sources.npy`` must exist with the recorded size
  (truncated or extended) and mtime (rewritten since the build), and the manifest's shape and
  dtype must fit the files (``N*3*crop*crop`` bytes in ``images.u8``, ``N`` int64 labels and
  source rows; an edited manifest with a recomputed digest still fails here). ``ensure_cache`` also
  compares the annotations file's sha256 (one small file) and the size and mtime of every
  source image (one ``stat`` each) with those recorded, and rebuilds on any difference.
- **On demand** (``verify_cache(root, full=True)``, ``ensure_cache(..., verify="full")``):
  the sha256 of both cache files and of every source image's bytes. Only this catches a
  change that keeps a file's size *and* mtime (media corruption, or a tool that restores
  mtimes); run it after copying a cache between machines, or when in doubt.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np

from common.digests import file_sha256

CACHE_VERSION = 3  # 3: the manifest records the dtype, and the shape is checked against the files
CACHE_FILES = ("images.u8", "labels.npy", "sources.npy")


class CacheError(RuntimeError):
    """A cache folder that cannot be used; the message names the file and the problem.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """


def file_record(path: Path, *, sha256: bool) -> dict:
    """What the manifest records of one cache file: size, mtime and (if asked) sha256.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    info = path.stat()
    record = {"bytes": info.st_size, "mtime_ns": info.st_mtime_ns}
    if sha256:
        record["sha256"] = file_sha256(path)
    return record


def manifest_digest(manifest: dict) -> str:
    """sha256 of the manifest without its own ``digest`` entry.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    body = {key: value for key, value in manifest.items() if key != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def manifest_path(root: Path) -> Path:
    """``root/manifest.json``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    return root / "manifest.json"


def read_cache_manifest(root: Path) -> dict:
    """The parsed manifest of the cache at ``root`` (``CacheError`` if missing or not JSON).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    path = manifest_path(root)
    if not path.is_file():
        raise CacheError(f"{path} is missing (the cache was never built, or its build was "
                         "interrupted)")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CacheError(f"{path} is not valid JSON: {error}") from error


def verify_cache(root: str | os.PathLike, *, full: bool = False) -> list[str]:
    """Every problem with the cache files at ``root``; an empty list means intact.

    Always (a few ``stat`` calls): the manifest parses, matches its digest and has this
    version; ``images.u8`` and ``labels.npy`` exist with the recorded size and mtime.
    With ``full=True`` also the sha256 of both files (reads them once).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    root = Path(root)
    try:
        manifest = read_cache_manifest(root)
    except CacheError as error:
        return [str(error)]
    if manifest.get("version") != CACHE_VERSION:
        return [f"{manifest_path(root)}: version {manifest.get('version')!r}, expected "
                f"{CACHE_VERSION}"]
    if manifest.get("digest") != manifest_digest(manifest):
        return [f"{manifest_path(root)} does not match its own digest (edited or damaged)"]
    if set(manifest.get("files", {})) != set(CACHE_FILES):
        return [f"{manifest_path(root)} does not list {', '.join(CACHE_FILES)}"]
    problems = []
    for name, expected in manifest["files"].items():
        path = root / name
        if not path.is_file():
            problems.append(f"{path} is missing")
            continue
        info = path.stat()
        if info.st_size != expected["bytes"]:
            problems.append(f"{path} has {info.st_size} bytes, the manifest says "
                            f"{expected['bytes']} (truncated or overwritten)")
        elif info.st_mtime_ns != expected["mtime_ns"]:
            problems.append(f"{path} was modified after the cache was built (mtime differs)")
        elif full and file_sha256(path) != expected["sha256"]:
            problems.append(f"{path} does not match its sha256 in the manifest (damaged)")
    return problems or _layout_problems(root, manifest)


def _layout_problems(root: Path, manifest: dict) -> list[str]:
    """The manifest's shape and dtype against the files (a ``stat`` and two ``.npy`` headers)."""
    where, shape, config = manifest_path(root), manifest.get("shape"), manifest.get("config")
    crop = config.get("crop_size") if isinstance(config, dict) else None
    if manifest.get("dtype") != "uint8":
        return [f"{where}: dtype {manifest.get('dtype')!r}, expected 'uint8'"]
    if not (isinstance(shape, list) and len(shape) == 4
            and all(type(n) is int and n > 0 for n in shape)) or shape[1:] != [3, crop, crop]:
        return [f"{where}: shape {shape!r} is not [N, 3, {crop}, {crop}] (its crop_size {crop})"]
    size = (root / "images.u8").stat().st_size
    if math.prod(shape) != size:
        return [f"{where}: shape {tuple(shape)} needs {math.prod(shape):,} bytes of uint8, but "
                f"images.u8 holds {size:,} (the manifest was edited, or belongs to another cache)"]
    problems = []
    for name, rows in (("labels.npy", (shape[0],)), ("sources.npy", (shape[0], 3))):
        found = _npy_layout(root / name)
        if found != f"int64 {rows}":
            problems.append(f"{where}: shape {tuple(shape)} means {shape[0]} images, but {name} "
                            f"holds {found}, not int64 {rows}")
    return problems


def _npy_layout(path: Path) -> str:
    """``"int64 (N,)"``: the dtype and shape in a ``.npy`` header (nothing else is read)."""
    try:
        array = np.load(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as error:
        return f"no readable array ({error})"
    return f"{array.dtype} {tuple(array.shape)}"
