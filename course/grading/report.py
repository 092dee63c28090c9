"""The report: ``grades.csv``, ``grades.json`` and one feedback notebook per student and notebook.

Every string from a submission is written through ``text.shown`` (no surrogate, no control
character), and each file is written atomically (``common.atomic_io``): a failure leaves the
previous report as it was, never a file cut short.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path

import nbformat

from common.atomic_io import write_text_atomically
from course.assignments import Exercise, learner_folder, strip_hidden_tests
from course.grading.config import Result
from course.grading.text import clean, shown
from course.student.messages import ENGLISH, translated


def _safe(value: object) -> object:
    """``value`` with every string (keys too) shown safely; numbers and the rest as they are."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {shown(k): _safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe(v) for v in value]
    return value


def worked_in(repo: Path, source_path: Path, language: str) -> Path:
    """The notebook a student of ``language`` worked in, for an instructor source: the edition's
    (for Chinese the same path under ``chapters/zh/``, for sources in ``repo``'s ``chapters/``)
    student version beside it (``exercises/ex01.ipynb`` for ``exercises/solutions/ex01.ipynb``),
    else the edition's instructor source."""
    path = source_path.resolve()
    chapters = (Path(repo) / "chapters").resolve()
    if language != ENGLISH and path.is_relative_to(chapters):
        path = chapters / "zh" / path.relative_to(chapters)
    folder = learner_folder(path.parent)
    student = folder / path.name if folder is not None else path
    return student if student.is_file() else path


def with_edition_markdown(nb: nbformat.NotebookNode, edition: Path) -> nbformat.NotebookNode:
    """``nb`` with the markdown cells of the ``edition`` the student worked in (``worked_in``: the
    same cells, code equal modulo comments), so a student reads the feedback in the language and
    the words they worked in; ``nb`` as it is where there is no such edition or its cells do not
    line up."""
    if not edition.is_file():
        return nb
    other = nbformat.read(edition, as_version=4)
    if [c.cell_type for c in other.cells] != [c.cell_type for c in nb.cells]:
        return nb
    for cell, translated_cell in zip(nb.cells, other.cells, strict=True):
        if cell.cell_type == "markdown":
            cell.source = translated_cell.source
    if "translation" in other.metadata:
        nb.metadata["translation"] = other.metadata["translation"]
    return nb


def write_feedback(nb: nbformat.NotebookNode, exercises: list[Exercise], results: list[Result],
                   path: Path, language: str = ENGLISH) -> None:
    """The answers, and under each check cell (hidden checks removed) its name, points and message,
    in the submission's ``language`` (``course.student.messages``)."""
    rows = {r.exercise.rsplit("/", 1)[1]: r for r in results}
    for exercise in exercises:
        cell, row = nb.cells[exercise.tests_cell], rows[exercise.key]
        cell.source = strip_hidden_tests(cell.source)
        line = f"{exercise.key}: {row.points:g} / {row.max_points:g} points: {row.message}"
        text = shown(translated(line, language)) + "\n"
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    for cell in nb.cells:  # the answers as handed in, but encodable (no lone surrogate)
        cell.source = clean(cell.source)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, nbformat.writes(nb))


def totals_of(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Points and maximum points per student, over the report's rows (students shown safely)."""
    totals: dict[str, dict[str, float]] = {}
    for row in rows:
        total = totals.setdefault(row["student"], {"points": 0.0, "max_points": 0.0})
        total["points"] += row["points"]
        total["max_points"] += row["max_points"]
    return totals


def write_report(results: list[Result], out: Path, info: dict) -> dict[str, dict[str, float]]:
    """Write ``grades.csv`` and ``grades.json`` (rows, totals per student, sandbox, integrity).

    Returns:
        The totals per student, as ``grades.json`` holds them.
    """
    out.mkdir(parents=True, exist_ok=True)
    rows = [_safe(asdict(r)) for r in results]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(Result.__dataclass_fields__))
    writer.writeheader()
    writer.writerows(rows)
    totals = totals_of(rows)
    report = {**_safe(info), "totals": totals, "results": rows}
    text = json.dumps(report, indent=1, ensure_ascii=False)
    write_text_atomically(out / "grades.csv", table.getvalue())
    write_text_atomically(out / "grades.json", text)
    return totals
