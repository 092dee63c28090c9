"""Classroom assignments: instructor sources, student versions, and the helpers their cells use.

Instructor sources are ``chapters/exercises/exNN_*.ipynb`` (with py:percent twins). They
follow nbgrader's conventions, so an instructor with nbgrader can use them directly:

- an *answer cell* has ``nbgrader`` metadata ``solution: true`` and ``grade_id:
  "<key>-answer"``; the solution sits between ``### BEGIN SOLUTION`` and ``### END SOLUTION``;
- a *check cell* has ``grade: true, locked: true, points: P, grade_id: "<key>-tests"``: the
  visible checks inside ``with checks("Exercise N"):``, then hidden checks between
  ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``.

Without nbgrader, ``python -m course.assignments build --out build/assignments`` writes the
student versions: solutions replaced by ``raise NotImplementedError()`` (or ``name = ...``
when the solution is only simple assignments), hidden checks removed, outputs cleared.
``checks`` (``course.checks``, re-exported here for the notebooks' ``from course.assignments
import checks``) reports an exercise that raises ``NotImplementedError`` as "not yet done"
instead of failing, so a student version runs top to bottom; the hidden checks, which
are outside ``checks``, still fail such an exercise when it is graded.
"""

from __future__ import annotations

import ast
import copy
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common.cli import is_dir, is_dir_or_absent, option, parse_dataclass_args
from common.paths import chapters_dir
from course.checks import answered, checks

__all__ = ["AssignmentFormatError", "Exercise", "answered", "build", "checks", "exercises_dir",
           "exercises_of", "instructor_sources", "main", "nbgrader_meta", "strip_hidden_tests",
           "strip_solutions", "student_version"]

if TYPE_CHECKING:  # nbformat costs ~2 s to import (jsonschema): every exercise kernel and judge
    import nbformat  # imports this module for `checks`, and none of them reads a notebook


def exercises_dir() -> Path:
    """``<repo>/chapters/exercises``, where the instructor sources live."""
    return chapters_dir() / "exercises"


BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


class AssignmentFormatError(ValueError):
    """An instructor source that breaks the conventions; the message names notebook and cell."""


@dataclass(frozen=True)
class Exercise:
    """One exercise of a notebook: its answer cell, its check cell and its points."""

    key: str
    answer_cell: int
    tests_cell: int
    points: float


def nbgrader_meta(cell: nbformat.NotebookNode) -> dict:
    """The cell's ``nbgrader`` metadata (empty for ordinary cells)."""
    return dict(cell.get("metadata", {}).get("nbgrader", {}))


def exercises_of(nb: nbformat.NotebookNode, *, name: str = "notebook") -> list[Exercise]:
    """The exercises of an instructor source, in order, after checking its conventions.

    Raises:
        AssignmentFormatError: Naming the notebook and cell of the first problem.
    """
    answers: dict[str, int] = {}
    tests: dict[str, tuple[int, float]] = {}
    for index, cell in enumerate(nb.cells):
        meta = nbgrader_meta(cell)
        where = f"{name} cell {index}"
        has_solution = BEGIN_SOLUTION in cell.source
        if not meta:
            if has_solution or BEGIN_HIDDEN in cell.source:
                raise AssignmentFormatError(f"{where}: solution/hidden markers in a cell "
                                            "without nbgrader metadata")
            continue
        grade_id = str(meta.get("grade_id", ""))
        key, _, role = grade_id.rpartition("-")
        if meta.get("solution"):
            if role != "answer" or not has_solution or cell.cell_type != "code":
                raise AssignmentFormatError(f"{where}: an answer cell needs grade_id "
                                            f"'<key>-answer' and {BEGIN_SOLUTION!r} markers")
            answers[key] = index
        elif meta.get("grade"):
            points = meta.get("points")
            if role != "tests" or not isinstance(points, int | float) or points <= 0:
                raise AssignmentFormatError(f"{where}: a check cell needs grade_id "
                                            "'<key>-tests' and points > 0")
            if BEGIN_HIDDEN not in cell.source or "with checks(" not in cell.source:
                raise AssignmentFormatError(f"{where}: a check cell needs `with checks(...)` "
                                            f"and a {BEGIN_HIDDEN!r} block")
            tests[key] = (index, float(points))
    if set(answers) != set(tests):
        raise AssignmentFormatError(f"{name}: exercises {sorted(set(answers) ^ set(tests))} "
                                    "lack an answer cell or a check cell")
    return [Exercise(key, answers[key], tests[key][0], tests[key][1])
            for key in sorted(tests, key=lambda k: tests[k][0])]


def _placeholder(region: list[str], indent: str) -> list[str]:
    """``name = ...`` lines if the solution is only one-line assignments, else the stub."""
    code = textwrap.dedent("\n".join(region))
    try:
        statements = ast.parse(code).body
    except SyntaxError:
        statements = []
    simple = statements and all(
        isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
        and s.lineno == s.end_lineno for s in statements)
    if simple:
        return [f"{indent}{s.targets[0].id} = ...  # YOUR CODE HERE" for s in statements]
    return [indent + line for line in STUB.splitlines()]


def strip_solutions(source: str) -> str:
    """Replace every solution region by a placeholder, keeping its indentation."""
    out: list[str] = []
    region: list[str] | None = None
    indent = ""
    for line in source.splitlines():
        if line.strip() == BEGIN_SOLUTION:
            region, indent = [], line[: len(line) - len(line.lstrip())]
        elif line.strip() == END_SOLUTION:
            if region is None:
                raise AssignmentFormatError(f"{END_SOLUTION!r} without {BEGIN_SOLUTION!r}")
            out += _placeholder(region, indent)
            region = None
        elif region is not None:
            region.append(line)
        else:
            out.append(line)
    if region is not None:
        raise AssignmentFormatError(f"{BEGIN_SOLUTION!r} without {END_SOLUTION!r}")
    return "\n".join(out)


def strip_hidden_tests(source: str) -> str:
    """Remove every hidden-tests region (markers included)."""
    out, hidden = [], False
    for line in source.splitlines():
        if line.strip() == BEGIN_HIDDEN:
            hidden = True
        elif line.strip() == END_HIDDEN:
            hidden = False
        elif not hidden:
            out.append(line)
    return "\n".join(out).rstrip()


def _refuse_raising_class_bodies(source: str, *, where: str) -> None:
    """A stub directly in a class body would crash the student's answer cell when run."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise AssignmentFormatError(f"{where}: the student version does not parse: {error}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(isinstance(s, ast.Raise) for s in node.body):
            raise AssignmentFormatError(f"{where}: class {node.name} would raise when defined; "
                                        "put the solution markers inside its methods")


def student_version(nb: nbformat.NotebookNode, *, name: str = "notebook") -> nbformat.NotebookNode:
    """A copy with solutions replaced, hidden checks removed, outputs cleared, cells locked."""
    exercises_of(nb, name=name)  # refuse a malformed source before writing anything
    student = copy.deepcopy(nb)
    for cell in student.cells:
        meta = nbgrader_meta(cell)
        for key in ("lines_to_next_cell", "execution"):  # jupytext / nbclient bookkeeping
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if meta.get("solution"):
            cell.source = strip_solutions(cell.source)
            _refuse_raising_class_bodies(cell.source, where=f"{name} {meta['grade_id']}")
            cell.metadata["deletable"] = False
        elif meta.get("grade") or meta.get("locked"):
            cell.source = strip_hidden_tests(cell.source)
            cell.metadata.update(deletable=False, editable=False)
    student.metadata.pop("jupytext", None)
    return student


def instructor_sources(root: Path | None = None) -> list[Path]:
    """The instructor notebooks ``exNN_*.ipynb`` under ``root``, sorted."""
    return sorted(Path(root or exercises_dir()).glob("ex[0-9][0-9]_*.ipynb"))


def sources_problem(folder: Path) -> str:
    """Why ``folder`` cannot be the instructor sources (``""`` if it can): it holds no
    ``exNN_*.ipynb`` (every student version, every grade would be of nothing)."""
    if Path(folder).is_dir() and not instructor_sources(folder):
        return f"{folder} holds no exercise notebooks (ex01_*.ipynb ...)"
    return ""


def build(out: Path, sources: list[Path]) -> dict[str, dict]:
    """Write the student version of each source to ``out`` plus ``manifest.json``.

    Returns:
        The manifest: per notebook, its exercises and their points.
    """
    out = Path(out)
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict] = {}
    for source in sources:
        nb = nbformat.read(source, as_version=4)
        student = student_version(nb, name=source.name)
        nbformat.write(student, out / source.name)
        exercises = exercises_of(nb, name=source.name)
        manifest[source.stem] = {"exercises": {e.key: e.points for e in exercises},
                                 "total_points": sum(e.points for e in exercises)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


@dataclass
class AssignmentsConfig:
    """The command line of ``python -m course.assignments``."""

    command: str = option("build", "build: write student versions; list: show exercises and points",
                          choices=("build", "list"), positional=True, nargs="?")
    out: Path = option(Path("build/assignments"), "output folder of the student versions")
    sources: Path | None = option(None, "folder of instructor sources (default: chapters/exercises)")


def check_config(config: AssignmentsConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field: student versions never overwrite the
    instructor sources."""
    problems = {**is_dir(config, "sources"), **is_dir_or_absent(config, "out")}
    sources = (config.sources or exercises_dir()).resolve()
    if "sources" not in problems and (empty := sources_problem(sources)):
        problems["sources"] = empty
    if "out" not in problems and config.command == "build" and config.out.resolve() == sources:
        problems["out"] = (f"{config.out} is the instructor sources' folder: the student "
                           "versions would overwrite them")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = parse_dataclass_args(AssignmentsConfig, argv, description=__doc__.splitlines()[0],
                                validate=check_config)
    args.sources = args.sources or exercises_dir()
    sources = instructor_sources(args.sources)  # not empty: check_config
    if args.command == "list":
        import nbformat

        for source in sources:
            exercises = exercises_of(nbformat.read(source, as_version=4), name=source.name)
            print(f"{source.name}: " + ", ".join(f"{e.key} ({e.points:g})" for e in exercises))
        return 0
    manifest = build(args.out, sources)
    for stem, entry in manifest.items():
        print(f"{args.out / (stem + '.ipynb')}: {len(entry['exercises'])} exercises, "
              f"{entry['total_points']:g} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
