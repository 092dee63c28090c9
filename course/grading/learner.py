"""``python -m course.grading --self PATH`` (``make grade-me NOTEBOOK=PATH``): a learner grades their own
exercise notebook where it is, its answer files beside it, hidden checks included.

The notebook and the answer files of its file exercises (``ex04_work/fixed_ddp.py`` ...) are copied into a
submissions folder of one student, ``me``, under ``--out`` (``build/grade-me``), and graded as an instructor
grades a class (``course.grading.classroom``): against the instructor source of the notebook's edition (a
notebook of ``chapters/zh/exercises/``, or one whose metadata says Chinese, against
``chapters/zh/exercises/solutions/``). Where bubblewrap works the answers run in the sandbox; where it does
not they run as trusted work (they are the learner's own), and the command says so. It prints the points
of each exercise with the failing check's message and the hints opened; the feedback notebook is in
``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from common.paths import repo_root
from course.assignments import NOTEBOOK_NAME, answer_files, exercises_of, instructor_sources
from course.grading.text import shown
from course.student.messages import CHINESE, ENGLISH, notebook_language, translated

PROG = "python -m course.grading"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--self", dest="notebook", type=Path, required=True,
                        help="your exercise notebook (e.g. chapters/exercises/ex04_distributed_training.ipynb)")
    parser.add_argument("--out", type=Path, default=Path("build/grade-me"),
                        help="where the report and the feedback notebook go (default: build/grade-me)")
    parser.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                        help="auto (default): the sandbox where bubblewrap works, else your code as trusted work")
    parser.add_argument("--cell-timeout", type=float, default=300.0, help="seconds per exercise (default 300)")
    return parser


def edition_sources(notebook: Path, metadata: object) -> Path:
    """The instructor sources of the notebook's edition."""
    parts = notebook.resolve().parts
    chinese = notebook_language(metadata) == CHINESE or any(
        parts[i:i + 2] == ("chapters", "zh") for i in range(len(parts)))
    root = repo_root() / "chapters"
    return (root / "zh" if chinese else root) / "exercises" / "solutions"


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    notebook: Path = args.notebook
    if not NOTEBOOK_NAME.fullmatch(notebook.name):
        parser.error(f"--self: {notebook} is not an exercise notebook (exNN_name.ipynb)")
    if not notebook.is_file():
        parser.error(f"--self: {notebook} is not a file")
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as error:
        parser.error(f"--self: cannot read {notebook}: {error}")
    metadata = nb.get("metadata") if isinstance(nb, dict) else None
    language = notebook_language(metadata)
    sources = edition_sources(notebook, metadata)
    source = next((p for p in instructor_sources(sources) if p.name == notebook.name), None)
    if source is None:
        parser.error(f"--self: no instructor source {notebook.name} in {sources}")
    if args.out.resolve() == notebook.parent.resolve() or notebook.resolve().is_relative_to(args.out.resolve()):
        parser.error(f"--out: {args.out} holds the notebook itself; choose another folder")

    import nbformat

    from course.grading.classroom import CannotGrade, SandboxRequired, grade
    from course.grading.config import GradingConfig
    from course.grading.report import write_report
    from course.grading.sandbox import choose_sandbox

    sandbox, why = choose_sandbox(args.sandbox)
    trusted = sandbox != "bwrap"
    mine = args.out.resolve() / "submissions" / "me"
    shutil.rmtree(mine, ignore_errors=True)
    mine.mkdir(parents=True)
    shutil.copyfile(notebook, mine / notebook.name)
    instructor = nbformat.read(source, as_version=4)
    for exercise in exercises_of(instructor, name=source.name):
        for relative in answer_files(instructor.cells[exercise.answer_cell]):
            if (notebook.parent / relative).is_file():
                (mine / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(notebook.parent / relative, mine / relative)
    if trusted:
        print(f"NOTE: {why}: grading your own notebook as trusted work (your code runs without the sandbox)",
              flush=True)
    config = GradingConfig(mine.parent, args.out.resolve() / "report", sources=sources,
                           notebooks=(notebook.stem,), sandbox="bwrap" if not trusted else "none",
                           trusted=trusted, cell_timeout=args.cell_timeout,
                           timeout=max(300.0, 12 * args.cell_timeout))
    try:
        results, info = grade(config)
    except (SandboxRequired, CannotGrade) as error:
        print(f"{PROG}: error: {shown(error)}", file=sys.stderr)
        return 2
    write_report(results, config.out, info)
    hints = {h["exercise"].rsplit("/", 1)[1]: h["opened"] for h in info.get("hints", [])}
    shown_language = language if language in (ENGLISH, CHINESE) else ENGLISH
    print(f"{notebook} ({'sandbox' if not trusted else 'trusted work, no sandbox'}):")
    for row in results:
        key = row.exercise.rsplit("/", 1)[1]
        opened = f", {hints[key]} hint(s) opened" if hints.get(key) else ""
        message = translated(row.message, shown_language)
        print(f"  {key:>4}  {row.points:g} / {row.max_points:g}{opened}  {shown(message)}")
    total, most = sum(r.points for r in results), sum(r.max_points for r in results)
    print(f"total: {total:g} / {most:g}")
    print(f"feedback notebook: {config.out / 'feedback' / 'me' / notebook.name}")
    return 0

