"""Generate (or verify) the synthetic shapes dataset used by every chapter.

    python -m common.tools.make_data                 # into the data folder, if missing or damaged
    python -m common.tools.make_data --force         # regenerate anyway
    python -m common.tools.make_data --root /tmp/shapes --num-train 60 --num-val 12

The same command is ``companion-make-data`` after ``pip install`` and
``python data_scripts/make_synthetic_data.py`` (``make data``) in a checkout. The data folder
is ``$COMPANION_DATA``, else ``<checkout>/data``, else ``~/.cache/torch-pipelines-companion``
(``common.paths.default_data_root``). Deterministic: the same options give byte-identical
files on the same library versions.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from common.cli import (
    at_least,
    fail,
    in_range,
    is_dir_or_absent,
    non_negative,
    option,
    parse_dataclass_args,
    positive,
)
from common.paths import default_data_root
from common.synthetic import SyntheticConfig, ensure_data, generate


@dataclass(frozen=True)
class MakeDataConfig(SyntheticConfig):
    """The generator's settings plus where to write and whether to regenerate anyway.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """

    root: Path | None = option(None, "dataset folder (default: <data folder>/shapes; the data "
                               "folder is $COMPANION_DATA, else data/ of the checkout, else "
                               "~/.cache/torch-pipelines-companion)")
    force: bool = option(False, "regenerate even if intact")


#: Below this side a shape is a few pixels of noise, not a circle or a star.
MIN_SIDE = 16


def check_config(config: MakeDataConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field (empty when it is valid).

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    problems = {**positive(config, "num_train", "num_val"), **non_negative(config, "seed"),
                **at_least(config, MIN_SIDE, "min_size", "max_size",
                           why="a smaller image holds no recognisable shape"),
                **in_range(config, "jpeg_quality", 1, 95), **is_dir_or_absent(config, "root")}
    if not problems.keys() & {"min_size", "max_size"} and config.max_size < config.min_size:
        problems["max_size"] = f"must be at least --min-size {config.min_size}, got {config.max_size}"
    return problems


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.tools.make_data`` (and ``companion-make-data``).

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    args = parse_dataclass_args(MakeDataConfig, argv, description=__doc__.splitlines()[0],
                                validate=check_config)
    config = SyntheticConfig(**{f.name: asdict(args)[f.name] for f in fields(SyntheticConfig)})
    root = args.root or default_data_root() / "shapes"
    try:  # the checks above cannot see every folder that refuses to be made (/proc, /sys, a read-only mount)
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return fail(f"--root: cannot create {root}: {error.strerror}")
    start = time.perf_counter()
    data = generate(root, config) if args.force else ensure_data(root, config)
    print(f"{data.root}: {config.num_train} train + {config.num_val} val images "
          f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
