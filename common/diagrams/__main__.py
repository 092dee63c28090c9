"""``python -m common.diagrams --out chapters/figures``: render every diagram, both languages.

    python -m common.diagrams --out chapters/figures            # the committed SVGs
    python -m common.diagrams --out build/diagrams --png        # PNGs to look at
    python -m common.diagrams --out build/d --only ring_allreduce --language zh
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from common.cli import is_dir_or_absent, option, parse_dataclass_args
from common.diagrams import DIAGRAMS, LANGUAGES, render, svg_path, write_all


@dataclass
class DiagramsConfig:
    """The command line of ``python -m common.diagrams``."""

    out: Path = option(Path("chapters/figures"), "output folder (Chinese under OUT/zh/)")
    only: tuple[str, ...] = option((), "render only these diagrams", choices=sorted(DIAGRAMS),
                                   nargs="+")
    language: tuple[str, ...] = option(LANGUAGES, "languages to render", choices=LANGUAGES,
                                       nargs="+")
    png: bool = option(False, "write PNG previews instead of the SVGs (to look at, not to commit)")
    font: tuple[str, ...] = option(("WenQuanYi Micro Hei", "Noto Sans CJK SC"),
                                   "fonts for the CJK glyphs of a PNG preview", nargs="+")


def main(argv: list[str] | None = None) -> int:
    config = parse_dataclass_args(DiagramsConfig, argv, description=__doc__.splitlines()[0],
                                  epilog=__doc__.split("\n\n", 1)[1],
                                  validate=lambda c: is_dir_or_absent(c, "out"))
    names = config.only or tuple(DIAGRAMS)
    if config.png:
        for name in names:
            for language in config.language:
                path = svg_path(config.out, name, language).with_suffix(".png")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(render(name, language, fmt="png", fonts=config.font))
                print(path)
        return 0
    for path in write_all(config.out, names=names, languages=config.language):
        print(path)
    print(f"{len(names)} diagrams x {len(config.language)} languages -> {config.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
