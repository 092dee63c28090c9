"""Generate (or verify) the synthetic shapes dataset used by every chapter.

    python data_scripts/make_synthetic_data.py               # into data/shapes, if missing/damaged
    python data_scripts/make_synthetic_data.py --force       # regenerate anyway
    python data_scripts/make_synthetic_data.py --root /tmp/shapes --num-train 60 --num-val 12

Deterministic: the same options give byte-identical files on the same library versions.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import fields
from pathlib import Path

from common.synthetic import SyntheticConfig, default_data_root, ensure_data, generate


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None,
                        help="dataset folder (default: data/shapes in the repository)")
    parser.add_argument("--force", action="store_true", help="regenerate even if intact")
    for field in fields(SyntheticConfig):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=int, default=field.default)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = SyntheticConfig(**{f.name: getattr(args, f.name) for f in fields(SyntheticConfig)})
    root = args.root or default_data_root() / "shapes"
    start = time.perf_counter()
    data = generate(root, config) if args.force else ensure_data(root, config)
    print(f"{data.root}: {config.num_train} train + {config.num_val} val images "
          f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
