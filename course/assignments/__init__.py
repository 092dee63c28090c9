"""Classroom assignments: instructor sources, student versions, and the helpers their cells use.

Instructor sources are ``chapters/exercises/solutions/exNN_*.ipynb`` (with py:percent twins). They
follow nbgrader's conventions, so an instructor with nbgrader can use them directly:

- an *answer cell* has ``nbgrader`` metadata ``solution: true`` and ``grade_id:
  "<key>-answer"``; the solution sits between ``### BEGIN SOLUTION`` and ``### END SOLUTION``;
- a *check cell* has ``grade: true, locked: true, points: P, grade_id: "<key>-tests"``: the
  visible checks inside ``with checks("Exercise N"):``, then hidden checks between
  ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``.

Without nbgrader, ``python -m course.assignments build`` (``make assignments``, the program in
``__main__``) writes the
student versions: solutions replaced by ``raise NotImplementedError()`` (or ``name = ...``
when the solution is only simple assignments), hidden checks removed, outputs cleared, relative
links pointed from where they are written. They are committed in ``chapters/exercises/`` (the
folder above ``solutions/``), where the chapters link: what a learner opens holds no solution.
A unit test holds each one equal to what ``build`` writes from its instructor source.
The notebooks' ``checks`` (the student runtime, ``course.student.checks``, which imports nothing
from here) reports an exercise that raises ``NotImplementedError`` as "not yet done"
instead of failing, so a student version runs top to bottom; the hidden checks, which
are outside ``checks``, still fail such an exercise when it is graded.

An exercise whose answer is a script or module (a *file exercise*: ex04 Exercise 2, ex06 Exercises 6, 8
and 9) names its file in a tag of the answer cell, ``answer-file:ex04_work/fixed_ddp.py:ex04_work/broken_ddp.py``
(paths relative to the notebook's folder; tags survive jupytext, nbgrader and the translation), and that
cell is one of nbgrader's read-only cells (``locked``, ``grade_id`` ``<key>-answer``), so that nbgrader hands
it out as it is (a solution cell without markers would become a stub that raises): the learner edits that file, the
check runs it and the grader takes it from the submission's folder, beside the notebook. Its answer cell
holds no solution (only a comment that says where the answer is); the solution is the file in the
instructor sources' folder (``solutions/ex04_work/fixed_ddp.py``), and ``build`` hands the file out as a
copy of the file it names (the broken script, with a first line that raises ``NotImplementedError``
until the learner removes it), or, where it names none, as the solution file with its solution regions
replaced (``strip_solutions``). ``build`` also copies the other ``.py`` files of ``exNN_work/`` (the
scripts the exercises show and run).

A code cell tagged ``demo`` only shows the learner something (a broken script failing, the way
a check will run an answer): the grader does not run it, and ``exercises_of`` refuses a source in
which a later cell uses a name a demo cell binds.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common.paths import chapters_dir
from course.assignments.demo_cells import DEMO_TAG, DemoCellError, check_demo, is_demo

__all__ = ["ANSWER_FILE_TAG", "DEMO_TAG", "NOT_DONE", "AssignmentFormatError", "Exercise", "answer_files", "build",
           "exercises_dir", "exercises_of", "instructor_sources", "is_demo", "is_exercise_notebook",
           "is_student_version", "learner_folder", "nbgrader_meta", "rebase_links", "solutions_dir",
           "strip_hidden_tests", "strip_solutions", "student_text", "student_version", "handout_text",
           "work_file_texts", "work_files", "write_work_files"]

if TYPE_CHECKING:  # nbformat costs ~2 s to import (jsonschema): imported where a notebook is read
    import nbformat


#: The folder of the instructor sources, inside the learner's folder of student versions.
SOLUTIONS = "solutions"
#: An exercise notebook's name: ``ex01_pytorch_basics.ipynb``.
NOTEBOOK_NAME = re.compile(r"ex[0-9][0-9]_.*\.ipynb")


def exercises_dir() -> Path:
    """``<repo>/chapters/exercises``: the student versions, what the chapters link and learners open."""
    return chapters_dir() / "exercises"


def solutions_dir() -> Path:
    """``<repo>/chapters/exercises/solutions``: the instructor sources (solutions, hidden checks)."""
    return exercises_dir() / SOLUTIONS


def learner_folder(sources: Path) -> Path | None:
    """Where the student versions of the instructor sources in ``sources`` are kept: the folder
    above a ``solutions/`` folder (``chapters/exercises``, ``chapters/zh/exercises``); None for
    any other folder."""
    return Path(sources).parent if Path(sources).name == SOLUTIONS else None


def is_exercise_notebook(notebook: Path) -> bool:
    """True for a notebook (or twin) of the exercises: in ``exercises/`` (a student version) or in
    ``exercises/solutions/`` (an instructor source)."""
    folder = Path(notebook).absolute().parent
    return folder.name == "exercises" or (folder.name == SOLUTIONS and folder.parent.name == "exercises")


def is_student_version(notebook: Path) -> bool:
    """True for a committed student version: ``exNN_*.ipynb`` in a folder named ``exercises``
    (generated by ``build``: no outputs, no jupytext twin)."""
    return Path(notebook).parent.name == "exercises" and bool(NOTEBOOK_NAME.fullmatch(Path(notebook).name))


BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


class AssignmentFormatError(ValueError):
    """An instructor source that breaks the conventions; the message names notebook and cell."""


@dataclass(frozen=True)
class Exercise:
    """One exercise of a notebook: its answer cell, its check cell and its points; ``files`` are the
    answer files of a file exercise (paths relative to the notebook's folder), empty for the others."""

    key: str
    answer_cell: int
    tests_cell: int
    points: float
    files: tuple[str, ...] = ()


#: The first lines of a handed-out answer file that is a copy of a broken script.
NOT_DONE = ('raise NotImplementedError("fix this script, then delete this line")  '
            "# YOUR CODE HERE: the answer file of an exercise\n")
#: How large an answer file may be (the grader refuses a bigger one).
MAX_ANSWER_FILE = 200_000


#: The tag of an answer cell whose answer is a file: ``answer-file:PATH`` or ``answer-file:PATH:START``.
ANSWER_FILE_TAG = "answer-file:"


def answer_files(cell: nbformat.NotebookNode) -> dict[str, str | None]:
    """The answer files an answer cell names in its tags (``answer-file:ex04_work/fixed_ddp.py:ex04_work/
    broken_ddp.py``): each path (relative to the notebook's folder) -> the file it is handed out as a copy
    of, or None (the solution file with its solution regions replaced)."""
    tags = cell.get("metadata", {}).get("tags", [])
    found: dict[str, str | None] = {}
    for tag in tags if isinstance(tags, list) else []:
        if isinstance(tag, str) and tag.startswith(ANSWER_FILE_TAG):
            path, _, start = tag[len(ANSWER_FILE_TAG):].partition(":")
            found[path] = start or None
    return found


def _safe_relative(path: str) -> bool:
    parts = Path(path).parts
    return bool(parts) and not Path(path).is_absolute() and ".." not in parts and "\\" not in path


def handout_text(sources: Path, path: str, start: str | None) -> str:
    """The handed-out version of the answer file ``path`` of the instructor sources in ``sources``."""
    if start:
        return NOT_DONE + (Path(sources) / start).read_text(encoding="utf-8")
    text = strip_solutions((Path(sources) / path).read_text(encoding="utf-8"))
    return text if text.endswith("\n") else text + "\n"


def work_files(sources: Path, stem: str) -> list[Path]:
    """The scripts of a notebook's exercises in the instructor sources: ``exNN_work/*.py``."""
    return sorted((Path(sources) / f"{stem.split('_')[0]}_work").glob("*.py"))


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
        files = answer_files(cell)
        if meta.get("solution") or (files and meta.get("locked") and not meta.get("grade")):
            if any(not _safe_relative(p) or (s and not _safe_relative(s)) for p, s in files.items()):
                raise AssignmentFormatError(f"{where}: answer_files are paths inside the notebook's folder")
            if role != "answer" or not (has_solution or files) or cell.cell_type != "code":
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
    for index, cell in enumerate(nb.cells):
        try:
            check_demo(nb, index, name) if is_demo(cell) else None
        except DemoCellError as error:
            raise AssignmentFormatError(str(error)) from None
    return [Exercise(key, answers[key], tests[key][0], tests[key][1], tuple(answer_files(nb.cells[answers[key]])))
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
    """The instructor notebooks ``exNN_*.ipynb`` under ``root`` (default ``solutions_dir()``), sorted."""
    return sorted(Path(root or solutions_dir()).glob("ex[0-9][0-9]_*.ipynb"))


def sources_problem(folder: Path) -> str:
    """Why ``folder`` cannot be the instructor sources (``""`` if it can): it holds no
    ``exNN_*.ipynb`` (every student version, every grade would be of nothing)."""
    if Path(folder).is_dir() and not instructor_sources(folder):
        return f"{folder} holds no exercise notebooks (ex01_*.ipynb ...)"
    return ""


_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def rebase_links(text: str, source_dir: Path, out_dir: Path) -> str:
    """Markdown ``text`` written in ``source_dir``, with its relative links pointed from ``out_dir``.

    A link to an instructor source (``.../solutions/exNN_*.ipynb``, such as the Chinese edition's
    "English edition" link) goes to its student version in the folder above: a student version
    links student versions.
    """
    source_dir, out_dir = os.path.abspath(source_dir), os.path.abspath(out_dir)

    def replace(match: re.Match) -> str:
        target = match.group(2)
        path, hash_, fragment = target.partition("#")
        if not path or _SCHEME.match(target):
            return match.group(0)
        place = Path(os.path.normpath(os.path.join(source_dir, path)))
        if place.parent.name == SOLUTIONS and NOTEBOOK_NAME.fullmatch(place.name):
            place = place.parent.parent / place.name
        return match.group(1) + Path(os.path.relpath(place, out_dir)).as_posix() + hash_ + fragment

    return _LINK.sub(replace, text)


def student_text(source: Path, out: Path) -> str:
    """The student version of the instructor source ``source`` as ``build`` writes it into the
    folder ``out``: ``student_version`` with its links rebased (``rebase_links``), as the text
    ``nbformat.write`` writes."""
    import nbformat

    student = student_version(nbformat.read(source, as_version=4), name=Path(source).name)
    for cell in student.cells:
        if cell.cell_type == "markdown":
            cell.source = rebase_links(cell.source, Path(source).parent, out)
    text = nbformat.writes(student)
    return text if text.endswith("\n") else text + "\n"


def build(out: Path, sources: list[Path], *, manifest: bool = True) -> dict[str, dict]:
    """Write the student version of each source to ``out`` (``student_text``), and
    ``manifest.json`` unless ``manifest`` is False (the committed learner folders have none).

    Returns:
        The manifest: per notebook, its exercises and their points.
    """
    out = Path(out)
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    listing: dict[str, dict] = {}
    for source in sources:
        exercises = exercises_of(nbformat.read(source, as_version=4), name=source.name)
        (out / source.name).write_text(student_text(source, out), encoding="utf-8")
        write_work_files(out, source, exercises)
        listing[source.stem] = {"exercises": {e.key: e.points for e in exercises},
                                "total_points": sum(e.points for e in exercises)}
    if manifest:
        (out / "manifest.json").write_text(json.dumps(listing, indent=1))
    return listing


def work_file_texts(source: Path, exercises: list[Exercise]) -> dict[str, str]:
    """The scripts handed out beside a notebook's student version, by their path relative to it: each
    answer file as handed out (``handout_text``), every other ``exNN_work/*.py`` of the instructor
    sources as it is."""
    import nbformat

    folder = Path(source).parent
    nb = nbformat.read(source, as_version=4)
    answers = {path: start for e in exercises for path, start in answer_files(nb.cells[e.answer_cell]).items()}
    texts = {script.relative_to(folder).as_posix(): script.read_text(encoding="utf-8")
             for script in work_files(folder, Path(source).stem)}
    texts = {relative: text for relative, text in texts.items() if relative not in answers}
    return texts | {relative: handout_text(folder, relative, start) for relative, start in answers.items()}


def write_work_files(out: Path, source: Path, exercises: list[Exercise]) -> list[Path]:
    """Hand out a notebook's scripts beside its student version in ``out`` (``work_file_texts``)."""
    return [_write(out / relative, text) for relative, text in work_file_texts(source, exercises).items()]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
