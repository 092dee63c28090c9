"""Check your images before any training: ``python -m common.images.check DIR`` (``companion-check-images``).

    python -m common.images.check DIR            # an ImageFolder root (train/, val/) or one split
    python -m common.images.check --train-csv train.csv --train-images images \\
        --val-csv val.csv --val-images images    # the guide's annotations CSV layout

Prints a table of classes (images, sizes as a viewer shows them, modes, formats per class and
split), one line per split of what the listing skipped, the notes, then every problem at once:
files that cannot be used (each named), images that do not decode, damaged JPEGs, the same bytes
in two classes or in both splits. Exit status 0: ready to train; 1: problems; 2: bad flags.
The trainers run the same listing before each run (without decoding every image).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.annotations import CSV_FLAGS, csv_flag_problems
from common.cli import is_dir, is_file, option, parse_dataclass_args
from common.images.checking import check_data


@dataclass
class CheckConfig:
    """The command line of ``python -m common.images.check``.

    Introduced in docs/scripts.md ("Your own images").
    """

    data: str = option("", "a folder: an ImageFolder root (train/<class>/, val/<class>/) or one "
                       "folder of class folders", positional=True, nargs="?")
    train_csv: str = option("", "instead of DIR: the training annotations CSV (file_name,label)")
    train_images: str = option("", "the folder --train-csv's file names are relative to")
    val_csv: str = option("", "the validation annotations CSV")
    val_images: str = option("", "the folder --val-csv's file names are relative to")
    decode: bool = option(True, "decode every image and look for damaged JPEGs and duplicate "
                          "bytes (--no-decode: the listing only, as the trainers do)")
    notes: int = option(20, "print at most this many notes (skipped files, duplicates in a class)")


def _check(config: CheckConfig) -> dict[str, str]:
    problems = {**is_dir(config, "data", "train_images", "val_images"),
                **is_file(config, "train_csv", "val_csv"), **csv_flag_problems(config)}
    if not config.data and not config.train_csv:
        problems["data"] = "give a folder (DIR) or the four annotations CSV flags"
    return problems


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.images.check`` (and ``companion-check-images``).

    Introduced in docs/scripts.md ("Your own images").
    """
    config = parse_dataclass_args(CheckConfig, argv, description=__doc__.splitlines()[0],
                                  validate=_check)
    if config.data:
        report = check_data(Path(config.data), decode=config.decode)
    else:
        flags = [Path(getattr(config, name)) for name in CSV_FLAGS]
        report = check_data(csv_splits={"train": (flags[0], flags[1]),
                                        "val": (flags[2], flags[3])}, decode=config.decode)
    print(report.table())
    print(*report.summaries, sep="\n")
    for note in report.notes[:config.notes]:
        print("note:", note)
    if len(report.notes) > config.notes:
        print(f"note: ... and {len(report.notes) - config.notes} more (--notes N)")
    for problem in report.problems:
        print("problem:", problem)
    print(report.verdict())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
