"""One submitted notebook: read without following links, its answer cells put into the instructor
source, turned into the judge's requests (what must not run refused first, what was left as handed out
only recorded), and each exercise scored from the judge's replies. The grader (``classroom``) does this
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

from course.assignments import (
    MAX_ANSWER_FILE,
    STUB,
    Exercise,
    answer_files,
    exercises_of,
    handout_text,
    is_demo,
    student_version,
    work_files,
)
from course.grading.config import GradingConfig, Result
from course.grading.inside.answer_rules import answer_problems
from course.grading.inside.channel import MAX_MESSAGE
from course.grading.judges import Run
from course.grading.text import shown


def _read_plain(path: Path, stop: Path, name: str, most: int, what: str) -> bytes:
    """The bytes of ``path``, read without following links: a symbolic link anywhere below ``stop``, a
    hard link, anything but a regular file (a FIFO would block ``open`` forever) or more than ``most``
    bytes is refused with a ``ValueError`` naming ``name``."""
    for part in [path, *path.parents]:
        if part == stop:
            break
        if part.is_symlink():
            raise ValueError(f"{shown(part.name)} is a symbolic link: hand in the file itself")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{shown(name)} is not a regular file: hand in {what} itself")
        if info.st_nlink > 1:
            raise ValueError(f"{shown(name)} is a hard link: hand in a copy of the file")
        if info.st_size > most:
            raise ValueError(f"{shown(name)} has {info.st_size:,} bytes, more than the {most:,} allowed")
        os.set_blocking(handle.fileno(), True)
        return handle.read(most + 1)


def read_submission(path: Path, folder: Path) -> nbformat.NotebookNode:
    """Read a submitted notebook without following links (``_read_plain``), at most 50 MiB.

    Raises:
        ValueError: Naming the link, the kind of file or the size.
    """
    return nbformat.reads(_read_plain(path, folder.parent, path.name, 50 * 2**20, "the notebook").decode("utf-8"),
                          as_version=4)


def read_answer_file(folder: Path, relative: str) -> str:
    """An answer file of a submission, ``folder/relative``, read as a notebook is (``_read_plain``): no
    link anywhere below ``folder``, a regular file, at most ``MAX_ANSWER_FILE`` bytes of UTF-8.

    Raises:
        FileNotFoundError: It is not there.
        ValueError: Naming the link, the kind of file or the size.
    """
    return _read_plain(folder / relative, folder, relative, MAX_ANSWER_FILE, "the file").decode("utf-8")


def submitted_files(source_path: Path, source: nbformat.NotebookNode, exercises: list[Exercise],
                    folder: Path) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """The answer files of the file exercises, read from ``folder`` (the submitted notebook's), with the
    scripts their checks run (``scripts``), by exercise; and, by exercise, why one is not graded (missing, unreadable, or every file as handed out:
    ``untouched``'s message)."""
    files: dict[str, dict[str, str]] = {}
    problems: dict[str, str] = {}
    for exercise in exercises:
        wanted = answer_files(source.cells[exercise.answer_cell])
        if not wanted:
            continue
        texts, same = {}, True
        for relative, start in wanted.items():
            try:
                texts[relative] = read_answer_file(folder, relative)
            except FileNotFoundError:
                problems[exercise.key] = (f"the answer file {relative} is missing from the submission "
                                          "(hand it in beside the notebook)")
                break
            except (OSError, ValueError) as error:
                problems[exercise.key] = f"cannot read the answer file {relative}: {error}"[:MAX_MESSAGE]
                break
            try:
                handed = handout_text(source_path.parent, relative, start)
            except OSError:
                handed = None
            same = same and handed is not None and _code(handed) is not None and _code(texts[relative]) == _code(handed)
        else:
            if same:
                problems[exercise.key] = f"not attempted ({', '.join(wanted)} as handed out)"
            else:
                files[exercise.key] = {**scripts(source_path, source, exercises), **texts}
    return files, problems


def scripts(source_path: Path, source: nbformat.NotebookNode, exercises: list[Exercise]) -> dict[str, str]:
    """The scripts a file exercise's check runs beside the answer (``exNN_work/*.py`` of the instructor
    sources that are no answer file, such as ex06's ``wrap_driver.py``): the instructor's, never the
    submission's."""
    answers = {path for e in exercises for path in answer_files(source.cells[e.answer_cell])}
    folder = source_path.parent
    return {relative: path.read_text(encoding="utf-8") for path in work_files(folder, source_path.stem)
            if (relative := path.relative_to(folder).as_posix()) not in answers}


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
                   recorded: Collection[str] = (), files: dict[str, dict[str, str]] | None = None) -> list[dict]:
    """The judge's requests in notebook order: setup cells, and one per exercise at its check cell
    (for the ``recorded`` exercises only their answer, which later exercises see but nothing checks);
    a file exercise's request carries its answer files (``files``), which the judge writes into the
    working copy for that exercise only."""
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
                             "answer": nb.cells[exercise.answer_cell].source,
                             **({"files": files[exercise.key]} if exercise.key in (files or {}) else {})})
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



def hints_opened(submission: nbformat.NotebookNode) -> dict[str, int]:
    """How many hints the student opened per exercise: the highest ``hint("exN", level)`` of a code cell
    that ran (it has an execution count). Recorded in the report; it changes a score only where the
    instructor asks (``--hint-cost``)."""
    opened: dict[str, int] = {}
    for cell in submission.cells:
        if cell.get("cell_type") != "code" or not cell.get("execution_count") or not isinstance(cell.get("source"), str) \
                or "hint(" not in cell.source or len(cell.source) > 10_000:
            continue
        try:
            tree = ast.parse(cell.source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hint" \
                    and len(node.args) == 2 and all(isinstance(a, ast.Constant) for a in node.args):
                key, level = node.args[0].value, node.args[1].value
                if isinstance(key, str) and type(level) is int and 1 <= level <= 9:
                    opened[key] = max(opened.get(key, 0), level)
    return opened


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
    files: dict[str, dict[str, str]] = field(default_factory=dict)  # key -> its answer files' texts
    hints: dict[str, int] = field(default_factory=dict)  # key -> how many hints the student opened

    @property
    def requests(self) -> list[dict]:
        return judge_requests(self.nb, self.exercises, self.refused | {k: "" for k in self.missing},
                              recorded=self.unattempted, files=self.files)

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
    files, file_problems = submitted_files(source_path, source, exercises, submission_path.parent)
    blank = untouched(nb, [e for e in exercises if e.key not in missing and e.key not in refused and not e.files],
                      handed_out(source, exercises))
    return Prepared(student, source_path, nb, exercises, missing, refused, submission.get("metadata"),
                    blank | file_problems, files, hints_opened(submission))
