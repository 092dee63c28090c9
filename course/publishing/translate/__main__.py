"""The Chinese edition: ``python -m course.publishing.translate extract|build|status|check``.

What each command does, and the files it reads and writes: the library, ``course.publishing.translate``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from common.cli import is_dir, option, parse_dataclass_args
from common.paths import chapters_dir
from course.assignments import SOLUTIONS, is_student_version, student_text
from course.publishing.translate import (
    build_text,
    built_scripts,
    check,
    english_notebooks,
    handed_out_scripts,
    load_po,
    po_path,
    required,
    scripts_of,
    shown_path,
    status_lines,
    update_po,
    zh_dir,
    zh_student_version,
)


@dataclass
class TranslateConfig:
    """The command line of ``python -m course.publishing.translate``."""

    command: str = option("status", "extract: update the .po files; build: write chapters/zh/; "
                          "status: progress per notebook; check: fail on anything missing",
                          choices=("extract", "build", "status", "check"), positional=True,
                          nargs="?")
    notebooks: tuple[str, ...] = option((), "notebooks relative to chapters/ (default: all for "
                                        "extract/status, those in chapters/zh/TRANSLATED for "
                                        "build/check)", nargs="+")
    chapters: Path | None = option(None, "the chapters folder (default: the repository's)")


def check_config(config: TranslateConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field: a missing folder or notebook is refused
    (a status of nothing would read as "complete")."""
    if problems := is_dir(config, "chapters"):
        return problems
    chapters = config.chapters or chapters_dir()
    if not english_notebooks(chapters):
        return {"chapters": f"{chapters} holds no notebooks"}
    outside = [nb for nb in config.notebooks if not nb.endswith(".ipynb") or ".." in Path(nb).parts
               or Path(nb).is_absolute()]
    if outside:
        return {"notebooks": f"not a notebook under {chapters}: {', '.join(outside)}"}
    missing = [nb for nb in config.notebooks if not (chapters / nb).is_file()]
    if missing:
        return {"notebooks": f"no such notebook in {chapters}: {', '.join(missing)}"}
    generated = [nb for nb in config.notebooks if is_student_version(chapters / nb)]
    if generated:
        return {"notebooks": "a student version is generated, not translated: name its instructor "
                             "source, " + ", ".join(str(Path(nb).parent / SOLUTIONS / Path(nb).name)
                                                   for nb in generated)}
    return {}


def main(argv: list[str] | None = None) -> int:
    args = parse_dataclass_args(TranslateConfig, argv, description=__doc__.splitlines()[0],
                                validate=check_config)
    chapters = args.chapters or chapters_dir()
    if args.command == "status":
        print("\n".join(status_lines(chapters, args.notebooks)))
        return 0
    default = english_notebooks(chapters) if args.command == "extract" else required(chapters)
    failures = []
    for notebook in args.notebooks or default:
        if args.command == "extract":
            nb = nbformat.read(chapters / notebook, as_version=4)
            po = update_po(notebook, nb, load_po(notebook, chapters), scripts_of(notebook, chapters))
            po_path(notebook, chapters).parent.mkdir(parents=True, exist_ok=True)
            po.save(str(po_path(notebook, chapters)))
            print(f"{shown_path(po_path(notebook, chapters), chapters)}: {po.percent_translated()} % translated, "
                  f"{len(po.fuzzy_entries())} fuzzy, {len(po.untranslated_entries())} untranslated")
        elif args.command == "build":
            target = zh_dir(chapters) / notebook
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(build_text(notebook, chapters), encoding="utf-8")
            print(f"wrote {shown_path(target, chapters)}")
            for path, text in built_scripts(notebook, load_po(notebook, chapters), chapters).items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                print(f"wrote {shown_path(path, chapters)}")
            if (student := zh_student_version(notebook, chapters)) is not None:
                student.write_text(student_text(target, student.parent), encoding="utf-8")
                print(f"wrote {shown_path(student, chapters)} (its student version)")
                for path, text in handed_out_scripts(notebook, chapters).items():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text, encoding="utf-8")
                    print(f"wrote {shown_path(path, chapters)} (handed out)")
        failures += check(notebook, chapters) if args.command in ("build", "check") else []
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
