"""CPU seconds per training sample: each trainer's data pipeline beside pytorch/examples'.

    python -m common.shards.sample_costs --out build/bench/sample_costs   # about a minute on 2 cores
    python -m common.shards.sample_costs --out build/bench/sample_costs --quick

On the same image files, in one process on one thread (no DataLoader workers: the cost, not the
parallelism), every pipeline below runs whole epochs of batches, in interleaved rounds; the table
holds the median CPU time per sample (``time.process_time``, steadier than wall time on a busy
machine) and its ratio to ``examples``:

- ``examples``: pytorch/examples' ImageNet recipe, ``ImageFolder`` with ``RandomResizedCrop``,
  ``RandomHorizontalFlip``, ``ToTensor`` and ``Normalize``, batched by the default collate.
- ``ddp_decode``: ``common.ddp.train``'s (and ``common.fsdp.train``'s) default training loader,
  ``--data-pipeline decode`` with its augmentation (``common.ddp.data``: ``SeededAugment`` over
  ``CropFlip``, the batch normalized last); ``ddp_decode_no_augment`` with ``--no-augment``;
  ``ddp_cache`` with ``--data-pipeline cache --no-augment`` (the cache built before timing).
- ``shards``: ``common.shards.train``'s training loader on shards of the same images.

It lives beside the shard reader because it times every trainer's pipeline, Chapter 5's too.
- ``v2_*``: the cost of each transform of ``V2TrainPreset`` (Chapter 2.2's augmentation), each row
  the preset up to that transform, so that the differences between rows are the transforms' costs.
  ``seeded_cropflip`` and ``cropflip`` show what the per-sample seed costs.

Writes ``sample_costs.csv`` and ``sample_costs.json`` (config, machine, every round) to ``--out``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch
from torch.utils.data import DataLoader, Subset

from common.cli import option, parse_dataclass_args, positive
from common.fast.timing import QUICK_DATA, intra_op_threads
from common.synthetic import ensure_data

BASELINE = "examples"


@dataclass
class SampleCostConfig:
    """What to measure.

    Introduced in docs/scripts.md ("What each transform costs").
    """

    out: Path = option(Path("build/bench/sample_costs"), "output folder (CSV, JSON, shards, cache)")
    data_root: Path | None = option(None, "a generated shapes dataset (default: the repository's data)")
    num_images: int = option(320, "training images per epoch")
    image_size: int = option(64, "side of the square training images (the trainers' default)")
    batch_size: int = option(32, "images per batch")
    repeats: int = option(5, "interleaved rounds (the median is reported)")
    quick: bool = option(False, "tiny data, a few seconds (given flags still win)")


QUICK = {"num_images": 16, "batch_size": 8, "repeats": 2, "image_size": 32}


def _examples(data, size: int, count: int):
    from torchvision import datasets, transforms

    from common.imagenet import IMAGENET_MEAN, IMAGENET_STD

    tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    folder = datasets.ImageFolder(str(data.imagefolder_dir("train")), tf)
    return Subset(folder, range(min(count, len(folder)))), None


def _trainer(data, config: SampleCostConfig, *flags: str):
    from common.ddp.config import parse_config
    from common.ddp.data import build_datasets
    from common.images.layouts import as_image_data

    settings = parse_config(["--data", str(data.root), "--image-size", str(config.image_size),
                             "--subset", str(config.num_images), *flags])
    train, _val, collate, *_ = build_datasets(settings, as_image_data(data))
    return train, collate


def _shards(data, config: SampleCostConfig) -> DataLoader:
    # common.shards.train's training loader (build_loaders), built here: an entry point is not
    # imported by a library module (ARCHITECTURE.md, "The facade rule").
    from common.ddp.data import CropFlip, NormalizeCollate
    from common.shards import ShardedImageDataset
    from common.shards.format import ensure_shards

    source = pd.read_csv(data.labels_csv("train")).head(config.num_images)
    samples = [(str(data.images_dir("train") / name), int(label))
               for name, label in zip(source.iloc[:, 0], source.iloc[:, 1], strict=True)]
    manifest = ensure_shards(samples, config.out / "shards" / "train", shard_size=64)
    dataset = ShardedImageDataset(manifest, CropFlip(config.image_size, scale=(0.6, 1.0)),
                                  equalize="none", batch_size=config.batch_size, seeded=True)
    return DataLoader(dataset, batch_size=config.batch_size, collate_fn=NormalizeCollate())


def _labels_only(samples: list) -> tuple[None, list]:
    return None, [label for _image, label in samples]


def _v2_stages(data, size: int, count: int) -> dict:
    from torchvision.transforms import v2

    from common.ddp.data import CropFlip, NormalizeCollate, SeededAugment
    from common.imagenet import IMAGENET_MEAN, IMAGENET_STD
    from common.images.layouts import as_image_data

    layout = as_image_data(data)
    stages = [("decode", v2.ToImage()),
              ("+random_resized_crop", v2.RandomResizedCrop(size, scale=(0.5, 1.0), antialias=True)),
              ("+flip", v2.RandomHorizontalFlip(0.5)), ("+rotation", v2.RandomRotation(15.0)),
              ("+colour_jitter", v2.ColorJitter(0.3, 0.3, 0.3)),
              ("+to_float_normalize", v2.Compose([v2.ToDtype(torch.float32, scale=True),
                                                  v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]))]

    def subset(transform):
        dataset = layout.dataset("train", transform)
        return Subset(dataset, range(min(count, len(dataset))))

    # Not batched (the first rows' images differ in size): the transforms' cost alone.
    rows = {f"v2_{name}": (subset(v2.Compose([t for _, t in stages[:k + 1]])), _labels_only)
            for k, (name, _) in enumerate(stages)}
    rows["cropflip"] = (subset(CropFlip(size)), NormalizeCollate())
    generator = torch.Generator()  # as common.ddp.data.build_datasets: seeded per sample
    rows["seeded_cropflip"] = (SeededAugment(subset(CropFlip(size, generator=generator)), seed=0,
                                             generator=generator), NormalizeCollate())
    return rows


def build(config: SampleCostConfig, data) -> dict[str, DataLoader]:
    """Every pipeline to time, as a DataLoader without workers.

    Introduced in docs/scripts.md ("What each transform costs").
    """
    size, count = config.image_size, config.num_images
    pairs = {BASELINE: _examples(data, size, count),
             "ddp_decode": _trainer(data, config),
             "ddp_decode_no_augment": _trainer(data, config, "--no-augment"),
             "ddp_cache": _trainer(data, config, "--no-augment", "--data-pipeline", "cache")}
    loaders = {name: DataLoader(dataset, batch_size=config.batch_size, collate_fn=collate)
               for name, (dataset, collate) in pairs.items()}
    loaders["shards"] = _shards(data, config)
    loaders.update({name: DataLoader(dataset, batch_size=config.batch_size, collate_fn=collate)
                    for name, (dataset, collate) in _v2_stages(data, size, count).items()})
    return loaders


def cpu_per_sample(loader: DataLoader) -> float:
    """CPU seconds per sample of one pass over ``loader`` (this process only: no workers).

    Introduced in docs/scripts.md ("What each transform costs").
    """
    for dataset in (loader.dataset, getattr(loader.dataset, "dataset", None)):
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(0)
    start, seen = time.process_time(), 0
    for _images, labels in loader:
        seen += len(labels)
    return (time.process_time() - start) / max(seen, 1)


def measure(config: SampleCostConfig, loaders: dict[str, DataLoader]) -> pd.DataFrame:
    """Interleaved rounds after one warm-up; the median per pipeline and its ratio to examples.

    Introduced in docs/scripts.md ("What each transform costs").
    """
    rounds: dict[str, list[float]] = {name: [] for name in loaders}
    for repeat in range(config.repeats + 1):
        for name, loader in loaders.items():
            value = cpu_per_sample(loader)
            if repeat:  # the first round warms caches and imports up
                rounds[name].append(value)
    median = {name: statistics.median(values) for name, values in rounds.items()}
    table = pd.DataFrame({"pipeline": list(median),
                          "cpu_us_per_sample": [v * 1e6 for v in median.values()],
                          "vs_examples": [v / median[BASELINE] for v in median.values()]})
    return table, rounds


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.shards.sample_costs``.

    Introduced in docs/scripts.md ("What each transform costs").
    """
    config = parse_dataclass_args(SampleCostConfig, argv, description=__doc__.splitlines()[0],
                                  presets={"quick": QUICK},
                                  validate=lambda c: positive(c, "num_images", "image_size",
                                                              "batch_size", "repeats"))
    config.out.mkdir(parents=True, exist_ok=True)
    if config.data_root is not None:
        from common.synthetic import ShapesData
        data = ShapesData(Path(config.data_root))
    elif config.quick:
        data = ensure_data(config.out / "data" / "shapes", QUICK_DATA, verbose=False)
    else:
        data = ensure_data(verbose=False)
    with intra_op_threads(1):
        loaders = build(config, data)
        table, rounds = measure(config, loaders)
    table.to_csv(config.out / "sample_costs.csv", index=False, float_format="%.3f")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    (config.out / "sample_costs.json").write_text(json.dumps({
        "config": {**asdict(config), "out": str(config.out), "data_root": str(config.data_root)},
        "machine": {"cores": os.cpu_count(), "load_average_1min": load}, "rounds": rounds},
        indent=1))
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    print(f"CPU seconds per sample, medians of {config.repeats} interleaved rounds, 1 thread; "
          f"load average {load:.1f} on {os.cpu_count()} cores" if load is not None else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
