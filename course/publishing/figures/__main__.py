"""The chapters' figures: ``python -m course.publishing.figures write|check|lessons``.

What each command does: the library, ``course.publishing.figures``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from common.cli import option, parse_dataclass_args
from common.paths import chapters_dir, repo_root
from course.publishing.figures import TIMING_CHAPTERS, chapter_figures, rewritten, run_lesson


@dataclass
class FiguresConfig:
    """The command line of ``python -m course.publishing.figures``."""

    command: str = option("check", "write: rewrite docs/figures.md's table; check: fail if it is out of "
                          "date; lessons: run the timing chapters and print each figure beside its promise",
                          choices=("write", "check", "lessons"), positional=True, nargs="?")
    timeout: int = option(900, "lessons: seconds a cell may run")


def main(argv: list[str] | None = None) -> int:
    args = parse_dataclass_args(FiguresConfig, argv, description=__doc__.splitlines()[0])
    chapters, document = chapters_dir(), repo_root() / "docs" / "figures.md"
    if args.command in ("write", "check"):
        text = document.read_text(encoding="utf-8")
        wanted = rewritten(text, chapter_figures(chapters))
        if args.command == "write":
            document.write_text(wanted, encoding="utf-8")
            print(f"wrote docs/figures.md: {wanted.count(chr(10) + '| `')} figures")
            return 0
        if wanted != text:
            print("docs/figures.md is out of date with the notebooks' outputs: run `make figures`", file=sys.stderr)
            return 1
        print("docs/figures.md matches the notebooks' outputs")
        return 0
    failed = 0
    for stem in TIMING_CHAPTERS:
        print(f"== {stem}", flush=True)
        for figure in run_lesson(chapters / f"{stem}.ipynb", args.timeout):
            print(f"{figure.key}: {figure.value}{figure.unit} — {figure.detail}", flush=True)
            failed += "short of it" in figure.detail and not figure.busy
    print(f"{failed} promise(s) not kept on a machine that was not busy" if failed else "every promise kept")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
