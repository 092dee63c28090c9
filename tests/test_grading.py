"""course.grading: prepared submissions grade to the expected points; broken ones are contained."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from course.assignments import exercises_dir, exercises_of, student_version
from course.grading import GradingConfig, grade, graded_notebook, write_report

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "submissions"
#: Points each prepared submission must score; written by fixtures/submissions/make_submissions.py.
EXPECTED: dict[str, int] = json.loads((FIXTURES / "expected.json").read_text())
NAME = "ex01_pytorch_basics.ipynb"

REPO = Path(__file__).resolve().parents[1]
#: dave's endless loop costs this much, once. Other exercise cells take < 0.3 s on a quiet
#: machine and up to 2.5 s on an overloaded one: a shorter limit would make the test flaky.
CELL_TIMEOUT = 6
#: The submissions are graded by two graders side by side (one per core): one sandboxed where
#: bwrap works, one without a sandbox (where only the file guard stands between eve and the
#: instructor's files). eve is graded by both, every other student once; dave's timeout and
#: second run are balanced by giving the other grader more notebooks.
SANDBOXED = ("dave", "eve", "mallory")
UNSANDBOXED = ("alice", "blank", "bob", "carol", "eve")


def _copy_repo(root: Path) -> Path:
    """The parts of the repository a graded kernel sees: `common`, `course` and the ex01 source."""
    for package in ("common", "course"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    (root / "chapters" / "exercises").mkdir(parents=True)
    for suffix in (".ipynb", ".py"):
        shutil.copy(exercises_dir() / NAME.replace(".ipynb", suffix), root / "chapters" / "exercises")
    return root


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _submissions(root: Path, students: list[str]) -> Path:
    for student in students:
        (root / student).mkdir(parents=True)
        shutil.copy(FIXTURES / student / (NAME + ".json"), root / student / NAME)
    return root


def _grade_copy(root: Path, students: tuple[str, ...], sandbox: str) -> dict:
    """Grade ``students`` against a private copy of the repository; report its hashes too."""
    repo = _copy_repo(root / "repo")
    subs = _submissions(root / "subs", [s for s in students if s in EXPECTED])
    if "blank" in students:  # the student version, handed in untouched
        source = nbformat.read(repo / "chapters" / "exercises" / NAME, as_version=4)
        (subs / "blank").mkdir()
        nbformat.write(student_version(source), subs / "blank" / NAME)
    if "mallory" in students:  # not a notebook at all
        (subs / "mallory").mkdir()
        (subs / "mallory" / NAME).write_text('{"cells": [ this is not json')
    before = _digest(repo)
    config = GradingConfig(subs, root / "out", repo / "chapters" / "exercises", repo=repo,
                           timeout=180, cell_timeout=CELL_TIMEOUT, sandbox=sandbox)
    results, info = grade(config)
    return {"results": results, "info": info, "config": config, "before": before,
            "after": _digest(repo)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every prepared submission once, eve once more; one report from both graders."""
    tmp = tmp_path_factory.mktemp("grading")
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(_grade_copy, tmp / "a", SANDBOXED, "auto"),
                pool.submit(_grade_copy, tmp / "b", UNSANDBOXED, "none")]
        sandboxed, unsandboxed = (job.result() for job in jobs)
    results = sandboxed["results"] + [r for r in unsandboxed["results"] if r.student != "eve"]
    out = tmp / "report"
    write_report(results, out, sandboxed["info"])
    return {**sandboxed, "results": results, "out": out, "unsandboxed": unsandboxed}


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
    assert totals == {**{k: float(v) for k, v in EXPECTED.items()},
                      "blank": 0.0, "mallory": 0.0}, graded["results"]
    # The instructor's answers (in every submission but the broken exercises) pass the hidden checks.
    exercises = exercises_of(nbformat.read(exercises_dir() / NAME, as_version=4))
    for exercise in exercises:
        rows = [r for r in graded["results"] if r.exercise == f"{Path(NAME).stem}/{exercise.key}"]
        assert {r.max_points for r in rows} == {exercise.points}, rows
        assert any(r.points == exercise.points for r in rows), f"{exercise.key} never passed: {rows}"


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
    out = graded["out"]
    with open(out / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    report = json.loads((out / "grades.json").read_text())
    assert list(rows[0]) == ["student", "exercise", "points", "max_points", "message"]
    assert len(rows) == len(report["results"]) == len(graded["results"])
    assert report["totals"]["alice"]["points"] == EXPECTED["alice"]
    for grader, students in ((graded, SANDBOXED), (graded["unsandboxed"], UNSANDBOXED)):
        feedback = grader["config"].out / "feedback"
        assert {p.parent.name for p in feedback.glob(f"*/{NAME}")} == set(students) - {"mallory"}


@pytest.mark.slow
def test_without_sandbox_changes_are_detected_and_undone(graded):
    unsandboxed = graded["unsandboxed"]
    results, info = unsandboxed["results"], unsandboxed["info"]
    assert info["sandbox"] == "none"
    eve = _row(results, "eve", "ex3")
    assert eve.points == 0 and "models.py" in eve.message and "deleted" in eve.message
    assert any("eve" in line for line in info["integrity"])
    assert unsandboxed["after"] == unsandboxed["before"]
    assert _totals(results)["eve"] == EXPECTED["eve"]


def test_only_answer_cells_come_from_the_submission():
    source = nbformat.read(exercises_dir() / NAME, as_version=4)
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
