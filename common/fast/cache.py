"""Decode-and-resize once: a uint8 NumPy memmap cache of eval crops, with a manifest.

Layout of a cache folder::

    images.u8       raw uint8 array of shape (N, 3, crop, crop), C-order (a np.memmap)
    labels.npy      int64 labels, shape (N,)
    manifest.json   format version, config, shape, the source's fingerprint, sha256 of both files

The source fingerprint is a sha256 over the annotations file and every image's bytes, so
the cache is rebuilt when any source file (or the config) changes. A cache whose files do
not match their recorded sha256 or size is *damaged*: :func:`open_cache` refuses it and
:func:`ensure_cache` says so and rebuilds it. Files are written under temporary names and
renamed into place, manifest last, so an interrupted build never looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from filelock import FileLock
from torch.utils.data import DataLoader, Dataset

from common.data import CustomImageDataset
from common.fast.pipeline import DraftPilDecoder, keep_batch

CACHE_VERSION = 1
_CHUNK = 1 << 22


class CacheError(RuntimeError):
    """A cache folder that cannot be used; the message names the file and the problem.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """


@dataclass(frozen=True)
class CacheConfig:
    """The geometry stored in the cache: the guide's ``Resize`` then ``CenterCrop``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    resize_size: int = 256
    crop_size: int = 224


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def source_fingerprint(source: CustomImageDataset, indices: Sequence[int]) -> str:
    """sha256 over the annotations file and the bytes of every selected image, in order.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    digest = hashlib.sha256(source.annotations_file.read_bytes())
    for index in indices:
        digest.update(str(source.path(index).name).encode() + b"\0")
        digest.update(source.path(index).read_bytes())
    return digest.hexdigest()


class _DecodeForCache(Dataset):
    """Item ``i`` of the selection decoded to a uint8 crop (full decode: no draft)."""

    def __init__(self, source: CustomImageDataset, indices: Sequence[int],
                 config: CacheConfig) -> None:
        self.paths = [str(source.path(i)) for i in indices]
        self.decoder = DraftPilDecoder(resize_size=config.resize_size,
                                       crop_size=config.crop_size, draft=False)

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


def _manifest_path(root: Path) -> Path:
    return root / "manifest.json"


def _read_manifest(root: Path) -> dict:
    path = _manifest_path(root)
    if not path.is_file():
        raise CacheError(f"{path} is missing (the cache was never built, or its build was "
                         "interrupted)")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CacheError(f"{path} is not valid JSON: {error}") from error


def verify_cache(root: str | os.PathLike) -> list[str]:
    """Every problem with the cache files at ``root``; an empty list means intact.

    Checks the manifest, and the size and sha256 of ``images.u8`` and ``labels.npy``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    root = Path(root)
    try:
        manifest = _read_manifest(root)
    except CacheError as error:
        return [str(error)]
    if manifest.get("version") != CACHE_VERSION:
        return [f"{_manifest_path(root)}: version {manifest.get('version')!r}, expected "
                f"{CACHE_VERSION}"]
    problems = []
    for name, expected in manifest.get("files", {}).items():
        path = root / name
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif path.stat().st_size != expected["bytes"]:
            problems.append(f"{path} has {path.stat().st_size} bytes, the manifest says "
                            f"{expected['bytes']} (truncated or overwritten)")
        elif _sha256_file(path) != expected["sha256"]:
            problems.append(f"{path} does not match its sha256 in the manifest (damaged)")
    if not problems and set(manifest.get("files", {})) != {"images.u8", "labels.npy"}:
        problems.append(f"{_manifest_path(root)} does not list images.u8 and labels.npy")
    return problems


def open_cache(root: str | os.PathLike, *, check: bool = True) -> ImageCache:
    """Open a built cache read-only (memory-mapped; nothing is read until used).

    Args:
        root: The cache folder.
        check: Verify sizes and sha256 first (reads the files once).

    Raises:
        CacheError: Naming the file, if the cache is missing or damaged.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    root = Path(root)
    problems = verify_cache(root) if check else []
    if problems:
        raise CacheError(f"cache at {root} is unusable: " + "; ".join(problems))
    manifest = _read_manifest(root)
    images = np.memmap(root / "images.u8", dtype=np.uint8, mode="r",
                       shape=tuple(manifest["shape"]))
    labels = np.load(root / "labels.npy")
    return ImageCache(root, images, labels, manifest)


def build_cache(source: CustomImageDataset, root: str | os.PathLike,
                config: CacheConfig = CacheConfig(), *, indices: Sequence[int] | None = None,
                num_workers: int = 0, batch_size: int = 32) -> ImageCache:
    """Decode, resize and crop every selected image once and write the cache at ``root``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    indices = list(range(len(source))) if indices is None else [int(i) for i in indices]
    shape = (len(indices), 3, config.crop_size, config.crop_size)
    _manifest_path(root).unlink(missing_ok=True)  # incomplete until the manifest is back
    tmp_images = root / "images.u8.tmp"
    out = np.memmap(tmp_images, dtype=np.uint8, mode="w+", shape=shape)
    loader = DataLoader(_DecodeForCache(source, indices, config), batch_size=batch_size,
                        num_workers=num_workers, collate_fn=keep_batch)
    start = 0
    for batch in loader:
        out[start:start + len(batch)] = batch.numpy()
        start += len(batch)
    out.flush()
    del out
    os.replace(tmp_images, root / "images.u8")
    np.save(root / "labels.npy.tmp.npy", source.labels[indices].astype(np.int64))
    os.replace(root / "labels.npy.tmp.npy", root / "labels.npy")
    files = {name: {"bytes": (root / name).stat().st_size, "sha256": _sha256_file(root / name)}
             for name in ("images.u8", "labels.npy")}
    manifest = {"version": CACHE_VERSION, "config": asdict(config), "shape": list(shape),
                "source": {"annotations_file": str(source.annotations_file),
                           "indices": indices,
                           "fingerprint": source_fingerprint(source, indices)},
                "files": files}
    tmp_manifest = root / "manifest.json.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp_manifest, _manifest_path(root))
    return open_cache(root, check=False)


def stale_reason(root: str | os.PathLike, source: CustomImageDataset, config: CacheConfig,
                 indices: Sequence[int]) -> str | None:
    """Why the cache at ``root`` does not hold ``source`` under ``config`` (None if it does).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    problems = verify_cache(root)
    if problems:
        return problems[0]
    manifest = _read_manifest(Path(root))
    if manifest["config"] != asdict(config):
        return f"built with {manifest['config']}, wanted {asdict(config)}"
    if manifest["source"]["indices"] != list(indices):
        return "built from a different selection of images"
    if manifest["source"]["fingerprint"] != source_fingerprint(source, indices):
        return f"the source ({source.annotations_file} or its images) has changed"
    return None


def ensure_cache(source: CustomImageDataset, root: str | os.PathLike,
                 config: CacheConfig = CacheConfig(), *, indices: Sequence[int] | None = None,
                 num_workers: int = 0, verbose: bool = True) -> ImageCache:
    """Open the cache at ``root`` if it is intact and current; otherwise (re)build it.

    Prints one line saying which, and why a rebuild was needed (damaged, stale, missing).
    Safe to call from several processes at once (a file lock next to ``root`` serialises them).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    indices = list(range(len(source))) if indices is None else [int(i) for i in indices]
    root = Path(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(root.parent / f".{root.name}.lock"):  # one builder at a time
        reason = stale_reason(root, source, config, indices)
        if reason is None:
            if verbose:
                print(f"Cache OK at {root}")
            return open_cache(root, check=False)  # stale_reason has just verified it
        if verbose:
            print(f"Building cache at {root}: {reason}")
        return build_cache(source, root, config, indices=indices, num_workers=num_workers)


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

    def _array(self) -> np.ndarray:
        if self._images is None:
            self._images = np.memmap(self.root / "images.u8", dtype=np.uint8, mode="r",
                                     shape=self.shape)
        return self._images

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, int]:
        image = torch.from_numpy(np.array(self._array()[idx]))
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self._labels[idx])

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        order = np.asarray(indices)
        labels = torch.from_numpy(self._labels[order])
        if self.transform is not None:
            return torch.stack([self[int(i)][0] for i in order]), labels
        return torch.from_numpy(self._array()[order]), labels
