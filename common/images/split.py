"""Split your images into train/val: ``python -m common.images.split`` (``companion-split-images``).

    python -m common.images.split SRC --out OUT                 # SRC/<class>/ -> OUT/{train,val}/<class>/
    python -m common.images.split --csv labels.csv --images DIR --out OUT   # -> OUT/train.csv, OUT/val.csv

Stratified (each class keeps its share), seeded (``--seed``), ``--val-fraction`` of every class to
validation (at least one image). A folder is split by hard links (``--mode link``: no bytes
copied; copies where a link cannot be made) or copies (``--mode copy``). The same bytes never
land on both sides: copies of one image go together, and the same image under two classes is
refused, naming both files. Then: ``python -m common.images.check OUT``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.annotations import BadSampleError
from common.cli import fail, in_range, is_dir, is_file, option, parse_dataclass_args
from common.images.splitting import MODES, split_csv, split_folder


@dataclass
class SplitConfig:
    """The command line of ``python -m common.images.split``.

    Introduced in docs/scripts.md ("Your own images").
    """

    source: str = option("", "a folder of class folders (SRC/<class>/<image>)", positional=True,
                         nargs="?")
    csv: str = option("", "instead of SRC: a labels CSV (file_name,label)")
    images: str = option("", "the folder --csv's file names are relative to")
    out: str = option("", "the new folder: OUT/train/<class>/, OUT/val/<class>/ (or OUT/train.csv, "
                      "OUT/val.csv)")
    val_fraction: float = option(0.2, "share of every class that goes to validation")
    seed: int = option(0, "seed of the split (the same seed, the same split)")
    mode: str = option("link", "link: hard links (copies where impossible); copy: copies",
                       choices=MODES)


def _check(config: SplitConfig) -> dict[str, str]:
    problems = {**is_dir(config, "source", "images"), **is_file(config, "csv"),
                **in_range(config, "val_fraction", 0.0, 1.0)}
    if config.val_fraction in (0.0, 1.0):
        problems["val_fraction"] = "must lie strictly between 0 and 1"
    if bool(config.source) == bool(config.csv):
        problems["source"] = "give a folder SRC or --csv with --images, one of them"
    if config.csv and not config.images:
        problems["images"] = "is needed with --csv (the folder its file names are relative to)"
    if not config.out:
        problems["out"] = "is needed: the folder the split is written to"
    elif config.source and Path(config.out).resolve().is_relative_to(Path(config.source).resolve()):
        problems["out"] = "must not lie inside SRC (it would be listed as a class)"
    return problems


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.images.split`` (and ``companion-split-images``).

    Introduced in docs/scripts.md ("Your own images").
    """
    config = parse_dataclass_args(SplitConfig, argv, description=__doc__.splitlines()[0],
                                  validate=_check)
    try:
        if config.source:
            counts = split_folder(config.source, config.out, val_fraction=config.val_fraction,
                                  seed=config.seed, mode=config.mode)
        else:
            counts = split_csv(config.csv, config.images, config.out,
                               val_fraction=config.val_fraction, seed=config.seed)
    except (BadSampleError, ValueError, OSError) as error:
        return fail(str(error), prog="common.images.split")
    copied = f" ({counts['copied']} copied: no hard link possible)" if counts.get("copied") else ""
    print(f"{config.out}: {counts['train']} training and {counts['val']} validation images{copied}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
