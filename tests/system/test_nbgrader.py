"""The exercises under the real nbgrader: generate_assignment -> autograde -> validate.

nbgrader is in the `[instructor]` extra (CI installs it); without it this file is skipped.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course.assignments import END_SOLUTION, exercises_of, nbgrader_meta, student_version

pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e .[instructor] "
                    "(CI installs it)")
from nbgrader.api import Gradebook  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NAME = "ex01_pytorch_basics"
SOURCE = REPO / "chapters" / "exercises" / "solutions" / f"{NAME}.ipynb"  # the instructor source
# Each nbgrader step executes the notebook in a fresh kernel: minutes on a busy 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    # nbgrader runs `alembic` from PATH: the venv's bin/ must be on it even when not activated.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=600)


def solution_code(source: str) -> str:
    """An answer cell's code with nbgrader's solution markers taken out."""
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", END_SOLUTION))


def answered(release: nbformat.NotebookNode, keys: set[str]) -> nbformat.NotebookNode:
    """The release notebook with the answers of ``keys`` written in, as a student would."""
    instructor = nbformat.read(SOURCE, as_version=4)
    solutions = {nbgrader_meta(c)["grade_id"]: c.source for c in instructor.cells
                 if nbgrader_meta(c).get("solution")}
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        grade_id = nbgrader_meta(cell).get("grade_id", "")
        if grade_id.removesuffix("-answer") in keys and grade_id in solutions:
            cell.source = solution_code(solutions[grade_id])
    return nb


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("course")
    (root / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.root = {str(root)!r}\n"
        "c.CourseDirectory.course_id = 'companion'\n"
        "c.ExecutePreprocessor.timeout = 300\n")
    (root / "source" / "ex01").mkdir(parents=True)
    shutil.copy(SOURCE, root / "source" / "ex01" / SOURCE.name)
    result = nbgrader(root, "generate_assignment", "ex01", "--force")
    assert result.returncode == 0, result.stdout + result.stderr
    return root


def test_nbgrader_release_matches_make_assignments(course):
    release = nbformat.read(course / "release" / "ex01" / SOURCE.name, as_version=4)
    ours = student_version(nbformat.read(SOURCE, as_version=4), name=SOURCE.name)
    committed = nbformat.read(SOURCE.parent.parent / SOURCE.name, as_version=4)  # what learners open
    for student in (ours, committed):
        assert [c.source for c in release.cells if c.cell_type == "code"] == \
            [c.source for c in student.cells if c.cell_type == "code"]


def test_validate_reports_unanswered_work(course):
    # (The instructor source passing every check is what nbval checks in `make test`.)
    release = course / "release" / "ex01" / SOURCE.name
    blank = nbgrader(course, "validate", str(release))
    assert "Success! Your notebook passes all the tests." not in blank.stdout, blank.stdout
    assert "VALIDATION FAILED" in blank.stdout and "NotImplementedError" in blank.stdout


def test_autograde_gives_points_for_blank_partial_and_complete_work(course):
    release = nbformat.read(course / "release" / "ex01" / SOURCE.name, as_version=4)
    exercises = exercises_of(nbformat.read(SOURCE, as_version=4), name=SOURCE.name)
    first, keys = exercises[0], {e.key for e in exercises}
    submissions = {"blank": release, "partial": answered(release, {first.key}),
                   "complete": answered(release, keys)}
    for student, nb in submissions.items():
        (course / "submitted" / student / "ex01").mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / student / "ex01" / SOURCE.name)
    result = nbgrader(course, "autograde", "ex01", "--create", "--force")
    assert result.returncode == 0, result.stdout + result.stderr
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {s: gradebook.find_submission("ex01", s).score for s in submissions}
        assert gradebook.find_assignment("ex01").max_score == sum(e.points for e in exercises)
    assert scores == {"blank": 0, "partial": first.points,
                      "complete": sum(e.points for e in exercises)}
