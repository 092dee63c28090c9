"""common.grading: prepared submissions grade to the expected points; broken ones are contained."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import nbformat
import pytest

from common.assignments import EXERCISES_DIR, exercises_of, student_version
from common.grading import (
    FileGuard,
    GradingConfig,
    choose_sandbox,
    grade,
    graded_notebook,
    write_report,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "submissions"
#: Points each prepared submission must score; written by fixtures/submissions/make_submissions.py.
EXPECTED: dict[str, int] = json.loads((FIXTURES / "expected.json").read_text())
NAME = "ex01_pytorch_basics.ipynb"

REPO = Path(__file__).resolve().parents[1]
CELL_TIMEOUT = 10  # dave's endless loop costs this much, once


def _copy_repo(root: Path) -> Path:
    """The parts of the repository a graded kernel sees: `common` and the ex01 source."""
    shutil.copytree(REPO / "common", root / "common",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "chapters" / "exercises").mkdir(parents=True)
    for suffix in (".ipynb", ".py"):
        shutil.copy(EXERCISES_DIR / NAME.replace(".ipynb", suffix), root / "chapters" / "exercises")
    return root


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _submissions(root: Path, students: list[str]) -> Path:
    for student in students:
        (root / student).mkdir(parents=True)
        shutil.copy(FIXTURES / student / (NAME + ".json"), root / student / NAME)
    return root


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every prepared submission once (sandboxed where bwrap works)."""
    tmp = tmp_path_factory.mktemp("grading")
    repo = _copy_repo(tmp / "repo")
    subs = _submissions(tmp / "subs", sorted(EXPECTED))
    source = nbformat.read(repo / "chapters" / "exercises" / NAME, as_version=4)
    for student, nb in (("solution", source), ("blank", student_version(source))):
        (subs / student).mkdir()
        nbformat.write(nb, subs / student / NAME)
    (subs / "mallory").mkdir()
    (subs / "mallory" / NAME).write_text('{"cells": [ this is not json')
    before = _digest(repo)
    config = GradingConfig(subs, tmp / "out", repo / "chapters" / "exercises", repo=repo,
                           timeout=180, cell_timeout=CELL_TIMEOUT)
    results, info = grade(config)
    write_report(results, config.out, info)
    return {"results": results, "info": info, "config": config, "before": before,
            "after": _digest(repo)}


def _totals(results) -> dict[str, float]:
    totals: dict[str, float] = {}
    for r in results:
        totals[r.student] = totals.get(r.student, 0.0) + r.points
    return totals


def _row(results, student: str, key: str):
    return next(r for r in results if r.student == student and r.exercise.endswith("/" + key))


@pytest.mark.slow
def test_each_submission_scores_exactly_the_expected_points(graded):
    totals = _totals(graded["results"])
    max_points = sum(e.points for e in exercises_of(nbformat.read(EXERCISES_DIR / NAME, as_version=4)))
    assert totals == {**{k: float(v) for k, v in EXPECTED.items()},
                      "solution": max_points, "blank": 0.0, "mallory": 0.0}, graded["results"]


@pytest.mark.slow
def test_failure_messages_say_what_went_wrong(graded):
    results = graded["results"]
    assert "SyntaxError" in _row(results, "bob", "ex2").message
    assert "ValueError" in _row(results, "carol", "ex1").message
    assert "RuntimeError" in _row(results, "carol", "ex4").message
    assert "timed out" in _row(results, "dave", "ex2").message
    assert "check failed" in _row(results, "alice", "ex4").message
    assert "not attempted" in _row(results, "blank", "ex3").message
    assert "cannot read" in _row(results, "mallory", "ex1").message
    assert _row(results, "dave", "ex3").points == 2, "exercises after the loop are still graded"


@pytest.mark.slow
def test_tampering_is_blocked_or_undone_and_reported(graded):
    assert graded["after"] == graded["before"], "the instructor's files must end up unchanged"
    eve = _row(graded["results"], "eve", "ex3")
    assert eve.points == 0
    if graded["info"]["sandbox"] == "none":
        assert "models.py" in eve.message and graded["info"]["integrity"]
    else:
        assert "Read-only file system" in eve.message or "OSError" in eve.message, eve.message


@pytest.mark.slow
def test_report_csv_and_json_agree(graded):
    out = graded["config"].out
    with open(out / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    report = json.loads((out / "grades.json").read_text())
    assert list(rows[0]) == ["student", "exercise", "points", "max_points", "message"]
    assert len(rows) == len(report["results"]) == len(graded["results"])
    assert report["totals"]["alice"]["points"] == EXPECTED["alice"]
    assert (out / "feedback" / "alice" / NAME).is_file()


@pytest.mark.slow
def test_without_sandbox_changes_are_detected_and_undone(tmp_path):
    repo = _copy_repo(tmp_path / "repo")
    subs = _submissions(tmp_path / "subs", ["eve"])
    before = _digest(repo)
    config = GradingConfig(subs, tmp_path / "out", repo / "chapters" / "exercises", repo=repo,
                           timeout=180, cell_timeout=CELL_TIMEOUT, sandbox="none")
    results, info = grade(config)
    eve = _row(results, "eve", "ex3")
    assert eve.points == 0 and "models.py" in eve.message and "deleted" in eve.message
    assert any("eve" in line for line in info["integrity"])
    assert _digest(repo) == before
    assert _totals(results)["eve"] == EXPECTED["eve"]


def test_only_answer_cells_come_from_the_submission():
    source = nbformat.read(EXERCISES_DIR / NAME, as_version=4)
    exercises = exercises_of(source)
    submission = student_version(source)
    first = exercises[0]
    submission.cells[first.tests_cell].source = "pass  # the checks, 'simplified'"
    submission.cells[first.answer_cell].source = "def standardize(x):\n    return x"
    del submission.cells[exercises[1].answer_cell]
    nb, missing = graded_notebook(source, submission, exercises)
    assert nb.cells[first.tests_cell].source == source.cells[first.tests_cell].source
    assert nb.cells[first.answer_cell].source == "def standardize(x):\n    return x"
    assert missing == {exercises[1].key}
    assert all(c.get("outputs", []) == [] for c in nb.cells if c.cell_type == "code")


def test_file_guard_reports_and_undoes_every_kind_of_change(tmp_path):
    (tmp_path / "a.py").write_text("a = 1\n")
    (tmp_path / "b.py").write_text("b = 2\n")
    guard = FileGuard([(tmp_path, ("*.py",))])
    assert guard.changes() == []
    (tmp_path / "a.py").write_text("a = 666\n")
    (tmp_path / "b.py").unlink()
    (tmp_path / "c.py").write_text("c = 3\n")
    (tmp_path / "notes.txt").write_text("not watched")
    changes = " ".join(guard.changes())
    assert "modified" in changes and "deleted" in changes and "created" in changes
    guard.restore()
    assert guard.changes() == []
    assert (tmp_path / "a.py").read_text() == "a = 1\n" and not (tmp_path / "c.py").exists()


def test_choose_sandbox_falls_back_or_refuses():
    assert choose_sandbox("none")[0] == "none"
    mode, why = choose_sandbox("auto")
    assert mode in ("bwrap", "none") and why
    if shutil.which("bwrap") is None:
        with pytest.raises(RuntimeError, match="bwrap"):
            choose_sandbox("bwrap")
