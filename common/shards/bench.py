"""Images/s of the shard reader: PIL (as chapter 5 wrote it) vs uint8 decoding, and peers.

    python -m common.shards.bench --out build/bench/shards          # about a minute on 2 cores
    python -m common.shards.bench --out build/bench/shards --quick  # a few seconds

In one run, on shards of the same images, round-robin, medians of repeats (``common.fast.timing``,
as in ``common.fast.benchmark``): ``shards_pil`` is ``ShardedImageDataset`` with the guide's
classic eval transform (PIL decode, float per sample); ``shards_uint8`` the same reader with
``v2.Resize`` + ``v2.CenterCrop`` on uint8 tensors (``decode_jpeg``) and the batch normalized
last; ``webdataset`` (where installed) reads the same JPEG bytes and applies the guide's
transform. Every pipeline ends in the same normalized float batch. The readers against
litdata and mosaicml-streaming, reader and decode apart and each in a process of its own
(``litdata.optimize`` switches its whole process to the spawn start method, which would change
every other pipeline's workers here), are ``common.shards.peers``.
Writes ``shards.csv`` and ``shards.json`` to ``--out`` and prints the two ratios the
chapter cares about: ``shards_uint8`` over ``shards_pil`` and over ``webdataset`` at the most
workers measured.
"""

from __future__ import annotations

import importlib.util
import io
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from common.cli import (
    finite,
    holds,
    is_dir_or_absent,
    non_negative,
    option,
    parse_dataclass_args,
    positive,
)
from common.fast.pipeline import BatchNormalize, NormalizedLoader
from common.fast.timing import QUICK_DATA, intra_op_threads, measure, summarize
from common.shards.dataset import ShardedImageDataset
from common.shards.format import ensure_shards, read_manifest
from common.synthetic import MAKE_DATA, ShapesData, ensure_data
from common.transforms import ClassicEvalPreset

BASELINE = "shards_pil"


@dataclass
class ShardBenchConfig:
    """What to measure; field names match ``common.fast.benchmark.BenchConfig`` where shared.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    out: Path = option(Path("build/bench/shards"), "output folder (shards, CSV, JSON)")
    data_root: Path | None = option(None, "a generated shapes dataset (default: the repository's data)")
    num_images: int = option(640, "images per epoch")
    shard_size: int = option(64, "samples per shard")
    batch_size: int = option(32, "images per batch")
    repeats: int = option(5, "round-robin repeats (the median is reported)")
    num_workers: tuple[int, ...] = option((0, 2), "DataLoader worker counts", nargs="+")
    min_seconds: float = option(0.25, "a timed repeat runs whole epochs for at least this long")
    max_images: int = option(0, "images read per timed repeat (0: whole epochs)")
    peers: bool = option(True, "also time webdataset where installed (litdata and mosaic: "
                         "python -m common.shards.peers)")
    threads: int = option(1, "intra-op threads of the main process")
    quick: bool = option(False, "tiny data, a few seconds (given flags still win)")
    progress: bool = option(True, "show progress bars")


QUICK = {"num_images": 32, "shard_size": 8, "batch_size": 8, "repeats": 2, "num_workers": (0, 1),
         "min_seconds": 0.02}


class _Guide:
    """The guide's eval transform on decoded JPEG bytes (for the peers' raw bytes)."""

    def __init__(self) -> None:
        self.transform = ClassicEvalPreset()

    def __call__(self, data: bytes):
        with Image.open(io.BytesIO(data)) as image:
            return self.transform(image.convert("RGB"))


def _wds_pipeline(urls: list[str]):
    import webdataset as wds  # optional peer
    return (wds.WebDataset(urls, shardshuffle=False, empty_check=False)
            .to_tuple("jpg", "cls").map_tuple(_Guide(), _label))


def _label(data: bytes) -> int:
    return int(data)


def build_pipelines(config: ShardBenchConfig, data: ShapesData) -> dict[tuple[str, int], Iterable]:
    """Every (pipeline, num_workers) to time, each yielding normalized float batches.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    source = pd.read_csv(data.labels_csv("train")).head(config.num_images)
    samples = [(str(data.images_dir("train") / name), int(label))
               for name, label in zip(source.iloc[:, 0], source.iloc[:, 1], strict=True)]
    manifest = ensure_shards(samples, config.out / "shards", shard_size=config.shard_size)
    urls = [str(shard.path) for shard in read_manifest(manifest)]
    geometry = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)])
    datasets = {
        BASELINE: ShardedImageDataset(manifest, ClassicEvalPreset(), shuffle=False,
                                      equalize="none"),
        "shards_uint8": ShardedImageDataset(manifest, geometry, shuffle=False, equalize="none"),
    }
    if config.peers and importlib.util.find_spec("webdataset"):
        datasets["webdataset"] = _wds_pipeline(urls)
    pipelines: dict[tuple[str, int], Iterable] = {}
    for name, dataset in datasets.items():
        for workers in config.num_workers:
            loader = DataLoader(dataset, batch_size=config.batch_size, num_workers=workers,
                                persistent_workers=workers > 0)
            pipelines[name, workers] = (NormalizedLoader(loader, normalize=BatchNormalize(buffers=2))
                                        if name == "shards_uint8" else loader)
    return pipelines


def ratios(table: pd.DataFrame) -> dict[str, float]:
    """``shards_uint8`` over ``shards_pil`` and over each peer, at the most workers measured.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    workers = table["num_workers"].max()
    at = table[table["num_workers"] == workers].set_index("pipeline")["images_per_s"]
    return {f"shards_uint8 / {name} (num_workers={workers})": float(at["shards_uint8"] / at[name])
            for name in at.index if name != "shards_uint8"}


def check_config(config: ShardBenchConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field (empty when it is valid).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    return {**positive(config, "num_images", "batch_size", "repeats", "shard_size", "threads"),
            **non_negative(config, "num_workers", "min_seconds", "max_images"),
            **finite(config, "min_seconds"), **is_dir_or_absent(config, "out"),
            **holds(config, "data_root", "train/labels.csv", hint=MAKE_DATA)}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.shards.bench``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    config = parse_dataclass_args(ShardBenchConfig, argv, description=__doc__.splitlines()[0],
                                  presets={"quick": QUICK}, validate=check_config)
    config.out.mkdir(parents=True, exist_ok=True)
    if config.data_root is not None:
        data = ShapesData(Path(config.data_root))
    elif config.quick:
        data = ensure_data(config.out / "data" / "shapes", QUICK_DATA, verbose=False)
    else:
        data = ensure_data(verbose=False)
    pipelines = build_pipelines(config, data)
    with intra_op_threads(config.threads):
        table = summarize(measure(config, pipelines, config.num_images), baseline=BASELINE)
    table.to_csv(config.out / "shards.csv", index=False, float_format="%.2f")
    found = ratios(table)
    (config.out / "shards.json").write_text(json.dumps(
        {"config": {**asdict(config), "out": str(config.out),
                    "data_root": str(config.data_root)}, "ratios": found}, indent=1))
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    for name, value in found.items():
        print(f"{name}: {value:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
