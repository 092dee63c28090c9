"""The trainers' ``--normalize``: whose mean and std the pixels are normalized with.

- ``imagenet``: ImageNet's (``common.imagenet``), what torchvision's pretrained weights were
  trained with: use it when ``--weights`` starts from such weights (fine-tuning), so the first
  layer sees inputs on the scale it learnt.
- ``dataset``: your training split's own per-channel mean and std (chapter 2.2: "your own
  statistics when training from scratch"), computed once from the training images as the run
  reads them (the same ``--image-size``, ``--resize`` and ``--orientation``: eval crops of the
  decode path), stored in ``statistics_<size>.json`` beside the split's uint8 cache and in the
  run's log; recomputed only when the training file list changes.
- ``auto`` (the default): ``imagenet`` with ``--weights``, ``dataset`` without.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from common.cli import option
from common.fast.cache import CacheError
from common.fast.pipeline import DraftPilDecoder
from common.imagenet import IMAGENET_MEAN, IMAGENET_STD
from common.images.layouts import ImageData
from common.images.pixels import RESIZES
from common.stats import RunningChannelStats

NORMALIZE = ("auto", "imagenet", "dataset")
Statistics = tuple[tuple[float, ...], tuple[float, ...]]


def normalize_option() -> Any:
    """The trainers' ``--normalize`` field (``common.ddp``, ``common.fsdp``, ``common.shards``).

    Introduced in docs/scripts.md ("Your own images").
    """
    return option("auto", "mean and std of the pixels: imagenet (ImageNet's, for pretrained "
                  "--weights); dataset (the training split's own, computed once, stored beside "
                  "the cache or the shards' manifest and in the log); auto: imagenet with --weights, dataset from "
                  "scratch", choices=NORMALIZE)


def resize_option() -> Any:
    """The trainers' ``--resize`` field (``common.images.pixels.squared``), the same in each.

    Introduced in docs/scripts.md ("Your own images").
    """
    return option("crop", "how a picture becomes a square: crop (shorter side to --image-size, "
                  "the middle cut out: a 2:1 panorama loses half); squash (the whole picture "
                  "stretched); pad (the whole picture on black)", choices=RESIZES)


def normalize_choice(config) -> str:
    """``"imagenet"`` or ``"dataset"``: ``config.normalize`` with ``auto`` decided by ``--weights``.

    Introduced in docs/scripts.md ("Your own images").
    """
    choice = getattr(config, "normalize", "imagenet")
    if choice == "auto":
        return "imagenet" if getattr(config, "weights", "") else "dataset"
    return choice


def dataset_statistics(data: ImageData, size: int, *, verbose: bool = False) -> Statistics:
    """Per-channel ``(mean, std)`` (0..1 scale) of ``data``'s training split at ``size``.

    Read from ``<cache_root>/statistics_<size>.json`` when that file was computed from the same
    training file list (its sha256), else computed (one pass, float64 sums) and written there.

    Introduced in docs/scripts.md ("Your own images").
    """
    files = data.file_list("train")
    decoder = DraftPilDecoder(resize_size=size, crop_size=size, draft=False, **data.pixels)
    return stored_statistics(Path(data.cache_root) / f"statistics_{size}.json", files.sha256,
                             lambda: (decoder(str(path)) for path in files.paths),
                             about={"image_size": size, "pixels": data.pixels},
                             verbose=verbose)


def stored_statistics(stored: Path, key: str, images: Callable[[], Iterable[torch.Tensor]], *,
                      about: dict, verbose: bool = False) -> Statistics:
    """Per-channel ``(mean, std)`` (0..1 scale) of the uint8 ``(3, H, W)`` tensors ``images()``
    yields, kept in the JSON file ``stored`` under ``key`` (what they were computed from: a
    file list's or the shards' sha256) and read back while ``key`` is the same.

    ``about`` is written beside them (the size and pixels they were computed at).

    Introduced in docs/scripts.md ("Your own images").
    """
    if blocked := next((folder for folder in [stored.parent, *stored.parent.parents]
                        if folder.is_file()), None):
        raise CacheError(f"cannot store the dataset statistics at {stored}: {blocked} is a file, "
                         "not a folder")
    if stored.is_file():
        try:
            saved = json.loads(stored.read_text())
            if saved.get("file_list_sha256") == key:
                return tuple(saved["mean"]), tuple(saved["std"])
        except (ValueError, KeyError, TypeError):
            pass  # damaged: computed again below
    running, count = RunningChannelStats(3), 0  # chapter 2.2's streaming sums (float64)
    for image in images():
        running.update(image.to(torch.float64) / 255.0)
        count += 1
    stats = running.result()
    result = (tuple(round(v, 6) for v in stats.mean),
              tuple(round(max(v, 1e-6), 6) for v in stats.std))
    stored.parent.mkdir(parents=True, exist_ok=True)
    partial = stored.with_name(f"{stored.name}.{os.getpid()}.partial")  # ranks write at once
    partial.write_text(json.dumps({"mean": result[0], "std": result[1], "images": count, **about,
                                   "file_list_sha256": key}, indent=1) + "\n")
    partial.replace(stored)
    if verbose:
        print(f"dataset statistics of {count} training images: mean {result[0]}, "
              f"std {result[1]} ({stored})")
    return result


def run_statistics(config, data: ImageData) -> dict:
    """``{"normalize": "imagenet" | "dataset", "mean": (...), "std": (...)}`` for a run.

    Introduced in docs/scripts.md ("Your own images").
    """
    return normalization(config, lambda: dataset_statistics(data, config.image_size))


def normalization(config, statistics: Callable[[], Statistics]) -> dict:
    """``run_statistics`` of any data: ``statistics()`` (the training split's own mean and std)
    is called only when ``--normalize`` asks for them (``normalize_choice``).

    Introduced in docs/scripts.md ("Your own images").
    """
    choice = normalize_choice(config)
    if choice == "imagenet":
        return {"normalize": choice, "mean": tuple(IMAGENET_MEAN), "std": tuple(IMAGENET_STD)}
    mean, std = statistics()
    return {"normalize": choice, "mean": mean, "std": std}
