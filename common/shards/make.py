"""Convert a CSV + images dataset into tar shards (WebDataset convention) with a manifest.

    python -m common.shards.make                        # <data>/shapes -> <data>/shards/{train,val}
    python -m common.shards.make --shard-size 50        # smaller shards
    python -m common.shards.make --csv data/shapes/train/labels.csv \\
        --images data/shapes/train/images --out /tmp/shards/train --shard-size 100
    python -m common.shards.make --imagefolder DIR --out /tmp/shards   # DIR/{train,val}/<class>/

The same command is ``companion-make-shards`` after ``pip install`` and
``python data_scripts/make_shards.py`` (``make shards``) in a checkout. Each sample becomes
``<key>.<format>`` (the original bytes, named by their content's format: a PNG called ``.jpg``
is ``<key>.png``) + ``<key>.cls`` (the label), keys ``00000000, 00000001, ...`` in CSV order;
``manifest.json`` lists every shard with its sample count, size, sha256 and the files its samples
come from. Every image is decoded once as it is written: a file that cannot be decoded stops the
command with one line naming it. Deterministic: the same input gives byte-identical shards.

``--imagefolder DIR`` reads an ImageFolder through ``common.images.listing`` (the trainers'
listing: system and hidden files skipped and counted in one line, files decided by content): a root with
``train/`` and ``val/`` class folders gives ``<out>/train`` and ``<out>/val``, the validation
labels numbered by the training classes; a folder of class folders gives one split in ``<out>``.
The manifest lists the class names, which ``common.shards.train`` takes as its class count.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from common.cli import (
    fail,
    file_name_part,
    is_dir,
    is_dir_or_absent,
    is_file,
    option,
    parse_dataclass_args,
    positive,
)
from common.data import CustomImageDataset
from common.images.layouts import SPLITS, at_least_two_classes, file_list, folder_data, image_folder
from common.paths import default_data_root
from common.shards.format import write_shards
from common.synthetic import ensure_data


@dataclass
class MakeShardsConfig:
    """The command line of ``python -m common.shards.make``.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    csv: Path | None = option(None, "annotations CSV (file_name,label); default: both splits of "
                              "the synthetic dataset")
    images: Path | None = option(None, "folder the CSV's file names are relative to")
    imagefolder: Path | None = option(None, "instead of --csv: an ImageFolder root (DIR/train/"
                                      "<class>/, DIR/val/<class>/: both splits) or one split "
                                      "(DIR/<class>/); class names into the manifest")
    out: Path | None = option(None, "output folder; without --csv, <out>/train and <out>/val "
                              "(default: <data folder>/shards)")
    shard_size: int = option(100, "samples per shard")
    prefix: str = option("shard", "shard file name prefix")


def _check(config: MakeShardsConfig) -> dict[str, str]:
    problems = {**positive(config, "shard_size"), **is_file(config, "csv"),
                **is_dir(config, "images", "imagefolder"), **is_dir_or_absent(config, "out"),
                **file_name_part(config, "prefix")}
    if config.csv is not None and (config.images is None or config.out is None):
        problems["csv"] = "--csv needs --images and --out"
    if config.images is not None and config.csv is None:
        problems["images"] = "--images needs --csv (the annotations it names files of)"
    if config.imagefolder is not None and (config.csv is not None or config.out is None):
        problems["imagefolder"] = "needs --out, and no --csv (one source at a time)"
    return problems


def parse_args(argv: list[str] | None = None) -> MakeShardsConfig:
    """The command line parsed and checked (exits with a usage message when invalid).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    return parse_dataclass_args(MakeShardsConfig, argv, description=__doc__.splitlines()[0],
                                validate=_check)


def convert(csv: Path, images: Path, out: Path, *, shard_size: int, prefix: str,
            classes: tuple[str, ...] = ()) -> Path:
    """Shard one split; prints one line per shard and returns the manifest path.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    dataset = CustomImageDataset(csv, images)  # validates every row before writing anything
    return convert_dataset(dataset, out, shard_size=shard_size, prefix=prefix, classes=classes)


def convert_dataset(dataset, out: Path, *, shard_size: int, prefix: str,
                    classes: tuple[str, ...] = ()) -> Path:
    """Shard a ``CustomImageDataset`` or an ``ImageFolder``, in its order; the manifest path.

    Introduced in docs/scripts.md ("Your own images").
    """
    if getattr(dataset, "listing", None) is not None:
        print(dataset.listing.summary())
    files = file_list(dataset)
    samples = [(path, int(label)) for path, label in zip(files.paths, files.labels, strict=True)]
    start = time.perf_counter()
    manifest = write_shards(samples, out, shard_size=shard_size, prefix=prefix, classes=classes)
    for shard in json.loads(manifest.read_text())["shards"]:
        print(f"  {shard['name']}  {shard['num_samples']:5d} samples  "
              f"{shard['num_bytes'] / 1e6:6.2f} MB  sha256 {shard['sha256'][:12]}")
    print(f"{manifest}: {len(samples)} samples ({time.perf_counter() - start:.1f} s)")
    return manifest


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.shards.make`` (and ``companion-make-shards``).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    args = parse_args(argv)
    try:
        _make(args)
    except (FileNotFoundError, ValueError) as error:  # a bad CSV row, a missing image
        return fail(str(error), prog="common.shards.make")
    return 0


def convert_imagefolder(root: Path, out: Path, *, shard_size: int, prefix: str) -> list[Path]:
    """Shard an ImageFolder root (``train/``, ``val/`` into ``out/train``, ``out/val``) or one
    split (a folder of class folders, into ``out``); the manifest paths.

    Introduced in docs/scripts.md ("Your own images").
    """
    if (root / "train").is_dir() and (root / "val").is_dir():
        data = folder_data(root, remember=False)  # writes only to out
        return [convert_dataset(data.dataset(split), out / split, shard_size=shard_size,
                                prefix=prefix, classes=data.classes) for split in SPLITS]
    dataset = image_folder(root)
    classes = tuple(dataset.classes)
    at_least_two_classes(classes, root)
    return [convert_dataset(dataset, out, shard_size=shard_size, prefix=prefix, classes=classes)]


def _make(args: MakeShardsConfig) -> int:
    if args.imagefolder is not None:
        convert_imagefolder(args.imagefolder, args.out, shard_size=args.shard_size,
                            prefix=args.prefix)
        return 0
    if args.csv is not None:
        convert(args.csv, args.images, args.out, shard_size=args.shard_size, prefix=args.prefix)
        return 0
    data = ensure_data(verbose=False)
    root = args.out or default_data_root() / "shards"
    for split in ("train", "val"):
        convert(data.labels_csv(split), data.images_dir(split), root / split,
                shard_size=args.shard_size, prefix=args.prefix, classes=data.classes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
