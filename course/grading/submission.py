"""One submitted notebook: read without following links, its answer cells put into the instructor
source, turned into the judge's requests (what must not run refused first, what was left as handed out
only recorded), and each exercise scored from the judge's replies. The grader (``grader``) does this
for every submission and runs the judges in between.
"""

from __future__ import annotations

import ast
import json
import os
import stat
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course.assignments import STUB, Exercise, exercises_of, is_demo, student_version
from course.grading.config import GradingConfig, Result
from course.grading.inside.answer_rules import answer_problems
from course.grading.inside.channel import MAX_MESSAGE
from course.grading.judges import Run
from course.grading.text import shown


def read_submission(path: Path, folder: Path) -> nbformat.NotebookNode:
    """Read a submitted notebook without following links: a symbolic or hard link is refused, and
    anything but a regular file (a FIFO named like the notebook would block ``open`` forever).

    Raises:
        ValueError: Naming the link or the kind of file.
    """
    for part in [path, *path.parents]:
        if part == folder.parent:
            break
        if part.is_symlink():
            raise ValueError(f"{part.name} is a symbolic link: hand in the file itself")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{shown(path.name)} is not a regular file: hand in the notebook itself")
        if info.st_nlink > 1:
            raise ValueError(f"{shown(path.name)} is a hard link: hand in a copy of the file")
        os.set_blocking(handle.fileno(), True)
        return nbformat.reads(handle.read(50 * 2**20).decode("utf-8"), as_version=4)



def graded_notebook(source: nbformat.NotebookNode, submission: nbformat.NotebookNode,
                    exercises: list[Exercise]) -> tuple[nbformat.NotebookNode, set[str]]:
    """The instructor source with the submission's answer cells; also the keys missing."""
    answers: dict[str, str] = {}
    for cell in submission.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if isinstance(grade_id, str) and grade_id.endswith("-answer"):
            answers.setdefault(grade_id, cell.source if isinstance(cell.source, str) else "")
    graded = nbformat.from_dict(json.loads(json.dumps(source)))
    for cell in graded.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    missing = set()
    for exercise in exercises:
        text = answers.get(f"{exercise.key}-answer")
        if text is None:
            missing.add(exercise.key)
            text = STUB
        graded.cells[exercise.answer_cell].source = text
    return graded, missing


def judge_requests(nb: nbformat.NotebookNode, exercises: list[Exercise], refused: dict[str, str],
                   recorded: Collection[str] = ()) -> list[dict]:
    """The judge's requests in notebook order: setup cells, and one per exercise at its check cell
    (for the ``recorded`` exercises only their answer, which later exercises see but nothing checks)."""
    by_tests = {e.tests_cell: e for e in exercises}
    answers = {e.answer_cell for e in exercises}
    requests = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or index in answers or is_demo(cell):  # a demo only shows something
            continue
        exercise = by_tests.get(index)
        if exercise is None:
            requests.append({"op": "setup", "index": index, "code": cell.source})
        elif exercise.key in recorded:
            requests.append({"op": "answer", "key": exercise.key, "answer": nb.cells[exercise.answer_cell].source})
        elif exercise.key not in refused:
            requests.append({"op": "exercise", "key": exercise.key, "check": cell.source,
                             "answer": nb.cells[exercise.answer_cell].source})
    return requests


def _code(source: str) -> str | None:
    """The code of a cell without its comments and layout (None if it does not parse)."""
    try:
        return ast.dump(ast.parse(source))
    except (SyntaxError, ValueError):
        return None


def handed_out(source: nbformat.NotebookNode, exercises: list[Exercise]) -> dict[str, str]:
    """Each exercise's answer cell as the student version hands it out (``student_version``)."""
    student = student_version(source)
    return {e.key: student.cells[e.answer_cell].source for e in exercises}


def untouched(nb: nbformat.NotebookNode, exercises: list[Exercise], stubs: dict[str, str]) -> dict[str, str]:
    """The exercises whose answer cell is the handed-out one (the same code; comments, such as a
    translated edition's, aside), with their row's message. They score nothing whatever runs, so
    no judge runs them: a blank notebook costs no judge at all."""
    found = {}
    for e in exercises:
        code = _code(stubs[e.key])
        if code is not None and _code(nb.cells[e.answer_cell].source) == code:
            raises = any(isinstance(node, ast.Raise) for node in ast.walk(ast.parse(stubs[e.key])))
            found[e.key] = ("not attempted (NotImplementedError)" if raises  # what running it would say
                            else "not attempted (the answer cell is as handed out)")
    return found


def score(exercise: Exercise, run: Run, refused: dict[str, str], missing: set[str],
          unattempted: dict[str, str] | None = None) -> tuple[float, str]:
    """Points and message of one exercise from what the judges said; the answer's integrity record
    (``rebound``) is not a score."""
    if exercise.key in missing:
        return 0.0, f"the answer cell '{exercise.key}-answer' is missing from the submission"
    if exercise.key in (unattempted or {}):
        return 0.0, unattempted[exercise.key]
    if exercise.key in refused:
        return 0.0, f"answer cell: {refused[exercise.key]}"
    if exercise.key in run.changes:
        return 0.0, ("changed files outside its working copy (undone): "
                     + "; ".join(run.changes[exercise.key]))[:MAX_MESSAGE]
    reply = run.replies.get(exercise.key)
    if reply is None:
        why = run.fatal.get(exercise.key) or next(iter(run.fatal.values()), "the notebook stopped earlier")
        setup = "; ".join(run.setup_errors.values())
        return 0.0, f"not run: {why}" + (f" (setup: {setup})" if setup else "")
    if reply.get("fatal"):
        return 0.0, str(reply["fatal"])[:MAX_MESSAGE]
    if reply.get("tampered"):
        return 0.0, ("tampered with the checks or the setup's files ("
                     + ", ".join(map(str, reply["tampered"])) + ")")[:MAX_MESSAGE]
    answer_error = reply.get("answer_error")
    check_error = reply.get("check_error")
    answer_error = str(answer_error)[:MAX_MESSAGE] if answer_error else None
    check_error = str(check_error)[:MAX_MESSAGE] if check_error else None
    if check_error is None:
        return exercise.points, "passed" + (f" (answer cell: {answer_error})" if answer_error else "")
    if check_error.startswith("NotImplementedError") or (answer_error or "").startswith("NotImplementedError"):
        return 0.0, "not attempted (NotImplementedError)"
    prefix = f"answer cell: {answer_error}; " if answer_error else ""
    return 0.0, f"{prefix}check failed: {check_error}"



def zero_rows(student: str, notebook: str, exercises: list[Exercise], message: str) -> list[Result]:
    """Zero points for every exercise of a notebook, with one message."""
    return [Result(student, f"{notebook}/{e.key}", 0.0, e.points, message) for e in exercises]


@dataclass
class Prepared:
    """A submitted notebook read and checked, waiting for its judge run."""

    student: str
    source_path: Path
    nb: nbformat.NotebookNode  # the instructor source with the submission's answer cells
    exercises: list[Exercise]
    missing: set[str]
    refused: dict[str, str]
    language: object  # the edition the student worked in (the notebook's metadata says)
    unattempted: dict[str, str] = field(default_factory=dict)  # key -> the row's message

    @property
    def requests(self) -> list[dict]:
        return judge_requests(self.nb, self.exercises, self.refused | {k: "" for k in self.missing},
                              recorded=self.unattempted)

    @property
    def needs_judge(self) -> bool:
        """Whether any exercise is left to run (setup cells alone earn nothing)."""
        return any(r["op"] == "exercise" for r in self.requests)


def prepare(student: str, source_path: Path, submission_path: Path | None,
            config: GradingConfig) -> Prepared | list[Result]:
    """Read one submitted notebook and refuse what must not run: a ``Prepared`` for the judges,
    or the rows already (not submitted, unreadable); never raises for anything the submission does."""
    source = nbformat.read(source_path, as_version=4)
    exercises = exercises_of(source, name=source_path.name)
    notebook = source_path.stem
    if submission_path is None:
        return zero_rows(student, notebook, exercises, "not submitted")
    try:
        submission = read_submission(submission_path, Path(config.submissions) / student)
    except (OSError, ValueError, KeyError, TypeError) as error:  # nbformat raises several kinds
        return zero_rows(student, notebook, exercises, f"cannot read the notebook: {error}"[:MAX_MESSAGE])
    nb, missing = graded_notebook(source, submission, exercises)
    refused = {e.key: why for e in exercises if e.key not in missing
               and (why := answer_problems(nb.cells[e.answer_cell].source))}
    blank = untouched(nb, [e for e in exercises if e.key not in missing and e.key not in refused],
                      handed_out(source, exercises))
    return Prepared(student, source_path, nb, exercises, missing, refused, submission.get("metadata"), blank)
