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
from pathlib import Path

import torch

from common.ddp.config import NORMALIZE  # noqa: F401 (the choices, documented here)
from common.fast.cache import CacheError
from common.fast.pipeline import DraftPilDecoder
from common.imagenet import IMAGENET_MEAN, IMAGENET_STD
from common.images.layouts import ImageData, file_list
from common.stats import RunningChannelStats


def normalize_choice(config) -> str:
    """``"imagenet"`` or ``"dataset"``: ``config.normalize`` with ``auto`` decided by ``--weights``.

    Introduced in docs/scripts.md ("Your own images").
    """
    choice = getattr(config, "normalize", "imagenet")
    if choice == "auto":
        return "imagenet" if getattr(config, "weights", "") else "dataset"
    return choice


def dataset_statistics(data: ImageData, size: int, *, verbose: bool = False
                       ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel ``(mean, std)`` (0..1 scale) of ``data``'s training split at ``size``.

    Read from ``<cache_root>/statistics_<size>.json`` when that file was computed from the same
    training file list (its sha256), else computed (one pass, float64 sums) and written there.

    Introduced in docs/scripts.md ("Your own images").
    """
    train = data.dataset("train")
    files = file_list(train)
    stored = Path(data.cache_root) / f"statistics_{size}.json"
    if blocked := next((folder for folder in [stored.parent, *stored.parent.parents]
                        if folder.is_file()), None):
        raise CacheError(f"cannot store the dataset statistics at {stored}: {blocked} is a file, "
                         "not a folder")
    if stored.is_file():
        try:
            saved = json.loads(stored.read_text())
            if saved.get("file_list_sha256") == files.sha256:
                return tuple(saved["mean"]), tuple(saved["std"])
        except (ValueError, KeyError, TypeError):
            pass  # damaged: computed again below
    decoder = DraftPilDecoder(resize_size=size, crop_size=size, draft=False, **data.pixels)
    running = RunningChannelStats(3)  # chapter 2.2's streaming sums (float64)
    for path in files.paths:
        running.update(decoder(str(path)).to(torch.float64) / 255.0)
    stats = running.result()
    result = (tuple(round(v, 6) for v in stats.mean),
              tuple(round(max(v, 1e-6), 6) for v in stats.std))
    stored.parent.mkdir(parents=True, exist_ok=True)
    partial = stored.with_suffix(".json.partial")
    partial.write_text(json.dumps({"mean": result[0], "std": result[1], "images": len(files.paths),
                                   "image_size": size, "pixels": data.pixels,
                                   "file_list_sha256": files.sha256}, indent=1) + "\n")
    partial.replace(stored)
    if verbose:
        print(f"dataset statistics of {len(files.paths)} training images: mean {result[0]}, "
              f"std {result[1]} ({stored})")
    return result


def run_statistics(config, data: ImageData) -> dict:
    """``{"normalize": "imagenet" | "dataset", "mean": (...), "std": (...)}`` for a run.

    Introduced in docs/scripts.md ("Your own images").
    """
    choice = normalize_choice(config)
    if choice == "imagenet":
        return {"normalize": choice, "mean": tuple(IMAGENET_MEAN), "std": tuple(IMAGENET_STD)}
    mean, std = dataset_statistics(data, config.image_size)
    return {"normalize": choice, "mean": mean, "std": std}
