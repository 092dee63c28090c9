"""The exercises under the real nbgrader: generate_assignment -> autograde -> validate.

nbgrader is in the `[instructor]` extra (CI installs it); without it this file is skipped.

Each step runs nbgrader's own converter or validator (what ``nbgrader generate_assignment``, ``autograde``
and ``validate`` start) in this process, with the configuration the course's ``nbgrader_config.py``
gives, as the command line loads it from the course's root: the command line would start an interpreter
that imports nbgrader (about 3 CPU seconds) for each step, besides the kernels it starts either way.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import os
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

from course.assignments import END_SOLUTION, exercises_of, nbgrader_meta, student_version
from tests.system_parts import require

require("nbgrader", None if importlib.util.find_spec("nbgrader") else
        "the nbgrader package is not installed: pip install -e .[instructor] (make install installs it)")
from nbgrader.api import Gradebook  # noqa: E402
from nbgrader.converters import Autograde, GenerateAssignment  # noqa: E402
from nbgrader.coursedir import CourseDirectory  # noqa: E402
from nbgrader.utils import capture_log  # noqa: E402
from nbgrader.validator import Validator  # noqa: E402
from traitlets.config import Config  # noqa: E402
from traitlets.config.loader import PyFileConfigLoader  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NAME = "ex01_pytorch_basics"
SOURCE = REPO / "chapters" / "exercises" / "solutions" / f"{NAME}.ipynb"  # the instructor source
# Each nbgrader step executes the notebook in a fresh kernel: minutes on a busy 2-core machine.
# nbgrader's gradebook warns as SQLAlchemy 2 flushes (the command line prints the same to stderr).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")]


@contextlib.contextmanager
def _environment():
    """What the command line had: the repository importable in the kernels nbgrader starts, and the
    venv's bin/ on PATH even when not activated (nbgrader runs `alembic` from it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
        patch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
        yield


def _config(course: Path) -> Config:
    """The course's nbgrader_config.py, loaded from its root as the command line loads it."""
    return PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()


def nbgrader(course: Path, step: str, *, force: bool = True, create: bool = True, assignment: str = "ex01") -> dict:
    """``nbgrader generate_assignment ex01 --force`` (``step="generate"``) or ``nbgrader autograde ex01
    --create --force`` (``step="autograde"``), in this process: nbgrader's ``capture_log`` result
    (``success``, and ``log``, ``error`` where there are any)."""
    config = _config(course)
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = assignment
    if step == "generate":
        converter = GenerateAssignment(coursedir=coursedir, config=config)
        converter.create_assignment = create
    else:
        converter = Autograde(coursedir=coursedir, config=config)
        converter.create_student = create
    converter.force = force
    with _environment():
        return capture_log(converter)


def validate(course: Path, notebook: Path) -> str:
    """What ``nbgrader validate NOTEBOOK`` prints, in this process."""
    validator = Validator(config=_config(course))
    validator.stream = io.StringIO()
    with _environment():
        validator.validate_and_print(str(notebook))
    return validator.stream.getvalue()


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
    result = nbgrader(root, "generate")
    assert result["success"], result.get("log", "") + result.get("error", "")
    return root


def test_nbgrader_release_matches_make_assignments(course):
    release = nbformat.read(course / "release" / "ex01" / SOURCE.name, as_version=4)
    ours = student_version(nbformat.read(SOURCE, as_version=4), name=SOURCE.name)
    committed = nbformat.read(SOURCE.parent.parent / SOURCE.name, as_version=4)  # what learners open
    for student in (ours, committed):
        assert [c.source for c in release.cells if c.cell_type == "code"] == \
            [c.source for c in student.cells if c.cell_type == "code"]


def test_validate_reports_unanswered_work(course):
    # (The instructor source passing every check: the complete submission below, and every exercise
    # notebook graded in tests/system/test_grading_classroom.py.)
    release = course / "release" / "ex01" / SOURCE.name
    blank = validate(course, release)
    assert "Success! Your notebook passes all the tests." not in blank, blank
    assert "VALIDATION FAILED" in blank and "NotImplementedError" in blank, blank


def test_autograde_gives_points_for_blank_partial_and_complete_work(course):
    release = nbformat.read(course / "release" / "ex01" / SOURCE.name, as_version=4)
    exercises = exercises_of(nbformat.read(SOURCE, as_version=4), name=SOURCE.name)
    first, keys = exercises[0], {e.key for e in exercises}
    submissions = {"blank": release, "partial": answered(release, {first.key}),
                   "complete": answered(release, keys)}
    for student, nb in submissions.items():
        (course / "submitted" / student / "ex01").mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / student / "ex01" / SOURCE.name)
    result = nbgrader(course, "autograde")
    assert result["success"], result.get("log", "") + result.get("error", "")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {s: gradebook.find_submission("ex01", s).score for s in submissions}
        assert gradebook.find_assignment("ex01").max_score == sum(e.points for e in exercises)
    assert scores == {"blank": 0, "partial": first.points,
                      "complete": sum(e.points for e in exercises)}


def test_a_file_exercise_goes_out_with_its_handed_out_file_and_no_solution(course):
    """ex04 Exercise 2's answer is a file: the instructor copies the source and the student's ex04_work/
    (the handed-out files) into source/ex04/, and the release holds them as handed out, never the solution
    in solutions/ex04_work/; autograde then runs what each student hands back beside the notebook.
    (A second assignment of the module's course: its gradebook exists already, and creating one costs
    nbgrader an ``alembic`` process of about 6 CPU seconds.)"""
    from course.assignments import exercises_dir, solutions_dir

    name = "ex04_distributed_training.ipynb"
    source = course / "source" / "ex04"
    source.mkdir(parents=True)
    shutil.copy(solutions_dir() / name, source / name)
    shutil.copytree(exercises_dir() / "ex04_work", source / "ex04_work")
    result = nbgrader(course, "generate", assignment="ex04")
    assert result["success"], result.get("log", "") + result.get("error", "")
    release = course / "release" / "ex04"
    handed = (release / "ex04_work" / "fixed_ddp.py").read_text(encoding="utf-8")
    assert handed == (exercises_dir() / "ex04_work" / "fixed_ddp.py").read_text(encoding="utf-8")
    assert handed != (solutions_dir() / "ex04_work" / "fixed_ddp.py").read_text(encoding="utf-8")
    notebook = nbformat.read(release / name, as_version=4)
    committed = nbformat.read(exercises_dir() / name, as_version=4)
    assert [c.source for c in notebook.cells if c.cell_type == "code"] == \
        [c.source for c in committed.cells if c.cell_type == "code"]
