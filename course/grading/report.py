"""The report: ``grades.csv``, ``grades.json`` and one feedback notebook per student and notebook."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

import nbformat

from course.assignments import Exercise, strip_hidden_tests
from course.grading.config import Result


def write_feedback(nb: nbformat.NotebookNode, exercises: list[Exercise], results: list[Result],
                   path: Path) -> None:
    """The answers, and under each check cell (hidden checks removed) its name, points and message."""
    rows = {r.exercise.rsplit("/", 1)[1]: r for r in results}
    for exercise in exercises:
        cell, row = nb.cells[exercise.tests_cell], rows[exercise.key]
        cell.source = strip_hidden_tests(cell.source)
        text = f"{exercise.key}: {row.points:g} / {row.max_points:g} points: {row.message}\n"
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def write_report(results: list[Result], out: Path, info: dict) -> None:
    """Write ``grades.csv`` and ``grades.json`` (rows, totals per student, sandbox, integrity)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Result.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(r) for r in results)
    totals: dict[str, dict[str, float]] = {}
    for r in results:
        total = totals.setdefault(r.student, {"points": 0.0, "max_points": 0.0})
        total["points"] += r.points
        total["max_points"] += r.max_points
    report = {**info, "totals": totals, "results": [asdict(r) for r in results]}
    (out / "grades.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
