"""Decode-and-resize once: a uint8 NumPy memmap cache of eval crops, with a manifest.

Layout of a cache folder::

    images.u8       raw uint8 array of shape (N, 3, crop, crop), C-order (a np.memmap)
    labels.npy      int64 labels, shape (N,)
    sources.npy     int64 (N, 3): each cached image's source index, byte size and mtime (ns)
    manifest.json   format version, config, shape and dtype, what the cache was built from,
                    the size, mtime and sha256 of every file, the build time, its own digest
    .build.lock     the lock a build holds (``ensure_cache``)

What is checked, and when: ``common.fast.cache_files`` (``verify_cache``). The source is a
``CustomImageDataset`` or an ``ImageFolder`` (``common.images.layouts.file_list``): its file list (the
annotations file; the layout and every path and label) is part of the key, by sha256.

Files are written under temporary names and renamed into place, manifest last, so an
interrupted build never looks complete. A build holds ``.build.lock`` in the cache folder, so
processes that build one cold cache at once take turns: with ``ensure_cache`` the first builds,
the others wait and then open the finished cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from common.data import readonly_view
from common.digests import file_sha256
from common.fast.cache_files import (
    CACHE_FILES,
    CACHE_VERSION,
    CacheError,
    file_record,
    manifest_digest,
    manifest_path,
    read_cache_manifest,
    verify_cache,
)
from common.fast.pipeline import DraftPilDecoder, keep_batch
from common.images.layouts import FileList, file_list

if TYPE_CHECKING:  # filelock is imported where a cache is built
    from filelock import FileLock

#: Every ``source`` below is a ``CustomImageDataset`` or a torchvision ``ImageFolder``: what
#: ``common.images.layouts.file_list`` reads.


@dataclass(frozen=True)
class CacheConfig:
    """The geometry stored in the cache: the guide's ``Resize`` then ``CenterCrop``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    resize_size: int = 256
    crop_size: int = 224


def source_fingerprint(files: FileList, indices: Sequence[int]) -> str:
    """sha256 over the file list ``files`` (``common.images.layouts.file_list`` of the source: the
    annotations file; an ImageFolder's paths and labels) and the bytes of every selected image,
    in order.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    digest = hashlib.sha256(files.listing)
    for index in indices:
        path = Path(files.paths[index])
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def source_stats(files: FileList, indices: Sequence[int]) -> np.ndarray:
    """``int64 (N, 3)``: index, byte size and mtime (ns) of every selected image of the file
    list ``files``; one ``stat`` each, nothing read.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    paths = files.paths
    rows = np.empty((len(indices), 3), dtype=np.int64)
    for row, index in enumerate(indices):
        info = os.stat(paths[index])
        rows[row] = (index, info.st_size, info.st_mtime_ns)
    return rows


class _DecodeForCache(Dataset):
    """Item ``i`` of the selection decoded to a uint8 crop (full decode: no draft)."""

    def __init__(self, files: FileList, pixels: dict, indices: Sequence[int],
                 config: CacheConfig) -> None:
        self.paths = [str(files.paths[i]) for i in indices]
        # pixels: --orientation, --resize (common.images.layouts)
        self.decoder = DraftPilDecoder(resize_size=config.resize_size,
                                       crop_size=config.crop_size, draft=False, **pixels)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitems__(self, indices: Sequence[int]) -> torch.Tensor:
        return torch.stack([self.decoder(self.paths[i], where="building the cache")
                            for i in indices])


@dataclass
class ImageCache:
    """An opened cache: read-only ``images`` memmap ``(N, 3, crop, crop)`` and ``labels``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    root: Path
    images: np.ndarray
    labels: np.ndarray
    manifest: dict

    def __len__(self) -> int:
        return len(self.labels)


def _memmap(root: Path, shape: Sequence[int]) -> np.ndarray:
    # Copy-on-write: pages come from the page cache and nothing ever writes to them, but the
    # array is writable, so torch.from_numpy can view it without a non-writable warning.
    try:
        return np.memmap(root / "images.u8", dtype=np.uint8, mode="c", shape=tuple(shape))
    except (ValueError, TypeError, OSError) as error:  # opened with check=False
        raise CacheError(f"cache at {root}: cannot map images.u8 as {shape!r} "
                         f"({error})") from error


def open_cache(root: str | os.PathLike, *, check: bool = True) -> ImageCache:
    """Open a built cache read-only (memory-mapped; nothing is read until used).

    Args:
        root: The cache folder.
        check: Check the manifest and the files' sizes and mtimes first (``stat`` only;
            see :func:`verify_cache` for the full check).

    Raises:
        CacheError: Naming the file, if the cache is missing or damaged.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    root = Path(root)
    problems = verify_cache(root) if check else []
    if problems:
        raise CacheError(f"cache at {root} is unusable: " + "; ".join(problems))
    manifest = read_cache_manifest(root)
    images = _memmap(root, manifest["shape"])
    labels = np.load(root / "labels.npy")
    return ImageCache(root, images, labels, manifest)


def _folder_root(root: str | os.PathLike) -> Path:
    """``root`` as a Path, refused (``CacheError``) if it or a folder above it is a file."""
    root = Path(root)
    for folder in (root, *root.parents):
        if folder.exists():
            if not folder.is_dir():
                raise CacheError(f"cache root {root}: {folder} is a file, not a folder")
            break
    return root


def build_lock(root: Path) -> FileLock:
    """The lock every build of the cache at ``root`` holds: ``root/.build.lock`` (created).

    A second process that builds the same cold cache waits here instead of deleting and
    renaming files under the first one's feet.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    from filelock import FileLock  # only where a cache is built

    root.mkdir(parents=True, exist_ok=True)
    return FileLock(root / ".build.lock")


def _write_cache(source: Dataset, listed: FileList, root: Path, config: CacheConfig,
                 indices: list[int], *, num_workers: int, batch_size: int) -> ImageCache:
    started = time.perf_counter()
    shape = (len(indices), 3, config.crop_size, config.crop_size)
    manifest_path(root).unlink(missing_ok=True)  # incomplete until the manifest is back
    tmp_images = root / "images.u8.tmp"
    out = np.memmap(tmp_images, dtype=np.uint8, mode="w+", shape=shape)
    decode = _DecodeForCache(listed, getattr(source, "pixels", {}), indices, config)
    loader = DataLoader(decode, batch_size=batch_size,
                        num_workers=num_workers, collate_fn=keep_batch)
    start = 0
    for batch in loader:
        out[start:start + len(batch)] = batch.numpy()
        start += len(batch)
    out.flush()
    del out
    os.replace(tmp_images, root / "images.u8")
    np.save(root / "labels.npy.tmp.npy", listed.labels[indices].astype(np.int64))
    os.replace(root / "labels.npy.tmp.npy", root / "labels.npy")
    np.save(root / "sources.npy.tmp.npy", source_stats(listed, indices))
    os.replace(root / "sources.npy.tmp.npy", root / "sources.npy")
    files = {name: file_record(root / name, sha256=True) for name in CACHE_FILES}
    manifest = {"version": CACHE_VERSION, "config": asdict(config), "shape": list(shape),
                "dtype": "uint8",
                "source": {"annotations_file": listed.where,
                           "annotations_sha256": listing_sha256(listed),
                           "num_images": len(indices),
                           "fingerprint": source_fingerprint(listed, indices)},
                "files": files, "build_seconds": round(time.perf_counter() - started, 3)}
    manifest["digest"] = manifest_digest(manifest)
    tmp_manifest = root / "manifest.json.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp_manifest, manifest_path(root))
    return open_cache(root, check=False)


def stale_reason(root: str | os.PathLike, source: Dataset, config: CacheConfig,
                 indices: Sequence[int], *, full: bool = False,
                 files: FileList | None = None) -> str | None:
    """Why the cache at ``root`` does not hold ``source`` under ``config`` (None if it does).

    ``stat`` calls only, unless ``full``: then every byte of the cache and the sources is
    hashed and compared with the manifest. ``files``: ``file_list(source)`` if already made.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    problems = verify_cache(root, full=full)
    if problems:
        return problems[0]
    manifest = read_cache_manifest(Path(root))
    recorded = manifest["source"]
    if manifest["config"] != asdict(config):
        return f"built with {manifest['config']}, wanted {asdict(config)}"
    stored = np.load(Path(root) / "sources.npy")
    if len(stored) != len(indices) or not np.array_equal(stored[:, 0], np.asarray(indices)):
        return "built from a different selection of images"
    files = file_list(source) if files is None else files
    if recorded["annotations_sha256"] != listing_sha256(files):
        return f"the {files.name} has changed"
    changed = np.flatnonzero((source_stats(files, indices) != stored).any(axis=1))
    if len(changed):
        return (f"source image {Path(files.paths[indices[changed[0]]]).name} has changed (size "
                f"or mtime; {len(changed)} image(s) in all)")
    if full and recorded["fingerprint"] != source_fingerprint(files, indices):
        return f"the source images of the {files.name} have changed (content)"
    return None


def listing_sha256(files: FileList) -> str:
    """sha256 of a source's file list: the annotations file as it is (one small file hashed), or
    with the class names or the ImageFolder listing that follows it (``common.images.layouts.FileList``).

    Introduced in docs/scripts.md ("Your own images").
    """
    if files.csv is not None and not files.extra:
        return file_sha256(files.csv)
    return files.sha256


def _shown(path: Path) -> str:
    # Printed paths are relative to the working directory when they can be (no machine paths
    # in stored notebook outputs).
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def ensure_cache(source: Dataset, root: str | os.PathLike,
                 config: CacheConfig = CacheConfig(), *, indices: Sequence[int] | None = None,
                 num_workers: int = 0, verbose: bool = True, verify: str = "stat") -> ImageCache:
    """Open the cache at ``root`` if it is intact and current; otherwise (re)build it.

    Prints one line saying which, and why a rebuild was needed (damaged, stale, missing).
    ``verify="stat"`` (default) checks sizes, mtimes and the manifest (milliseconds even for
    tens of thousands of images); ``verify="full"`` also re-hashes every byte.
    Safe to call from several processes at once: the build lock (``build_lock``) serialises
    them, and the ones that waited find the cache built and open it.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    if verify not in ("stat", "full"):
        raise ValueError(f"verify must be 'stat' or 'full', got {verify!r}")
    indices = list(range(len(source))) if indices is None else [int(i) for i in indices]
    root = _folder_root(root)
    files = file_list(source)  # made once: the check and the build read it
    with build_lock(root):  # one builder at a time; the others then find it built
        reason = stale_reason(root, source, config, indices, full=verify == "full", files=files)
        if reason is None:
            if verbose:
                print(f"Cache OK at {_shown(root)}")
            return open_cache(root, check=False)  # stale_reason has just verified it
        if verbose:
            print(f"Building cache at {_shown(root)}: {reason}")
        return _write_cache(source, files, root, config, indices, num_workers=num_workers,
                            batch_size=32)


class CachedImageDataset(Dataset):
    """Samples from an :class:`ImageCache`: uint8 crops, fetched a whole batch at a time.

    ``__getitems__`` gathers a batch with one NumPy fancy-index read of the memmap and
    returns ``(uint8 (B, 3, H, W), int64 (B,))`` (use ``collate_fn=keep_batch``). An
    optional ``transform`` (e.g. ``v2.RandomHorizontalFlip``) runs on each uint8 sample,
    which is how cheap augmentation is added after the expensive decode was done once.
    Pickles without the array (a worker reopens the memmap), so it suits any start method.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    def __init__(self, root: str | os.PathLike, *, transform=None, check: bool = True) -> None:
        self.root = Path(root)
        cache = open_cache(self.root, check=check)
        self.shape = tuple(cache.images.shape)
        self._labels = cache.labels
        self._images: np.ndarray | None = cache.images
        self.transform = transform

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_images"] = None  # a memmap would pickle as a full in-memory copy
        return state

    @property
    def labels(self) -> np.ndarray:
        """All labels, in index order (a read-only view)."""
        return readonly_view(self._labels)

    def array(self) -> np.ndarray:
        """All crops, uint8 ``(N, 3, H, W)``: the cache's memmap (opened again after pickling).

        Introduced in chapters/03_1_efficient_pipelines.ipynb.
        """
        if self._images is None:
            self._images = _memmap(self.root, self.shape)
        return self._images

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, int]:
        image = torch.from_numpy(np.array(self.array()[idx]))
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self._labels[idx])

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        order = np.asarray(indices)
        labels = torch.from_numpy(self._labels[order])
        if self.transform is not None:
            return torch.stack([self[int(i)][0] for i in order]), labels
        return torch.from_numpy(self.array()[order]), labels

