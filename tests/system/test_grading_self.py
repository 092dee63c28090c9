"""``python -m course.grading --self PATH`` (``make grade-me NOTEBOOK=PATH``): a learner grades their own
notebook where it is, with its answer files, in the sandbox where bubblewrap works and as trusted work
where it does not (saying so), and reads the points of each exercise with the failing checks' messages."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course.assignments import exercises_dir, exercises_of, solutions_dir
from course.grading.learner import main
from course.grading.sandbox import choose_sandbox
from tests.fixtures.submissions.make_submissions import solution_of
from tests.system_parts import require

REPO = Path(__file__).resolve().parents[2]
NAME = "ex04_distributed_training.ipynb"


def _my_notebook(tmp_path: Path) -> Path:
    """The student version of ex04 in a folder of the learner's, with Exercise 1 answered right and
    Exercise 3 wrong; its answer file as handed out."""
    folder = tmp_path / "mywork"
    shutil.copytree(exercises_dir() / "ex04_work", folder / "ex04_work")
    source = nbformat.read(solutions_dir() / NAME, as_version=4)
    nb = nbformat.read(exercises_dir() / NAME, as_version=4)
    exercises = {e.key: e for e in exercises_of(source)}
    nb.cells[exercises["ex1"].answer_cell].source = solution_of(source.cells[exercises["ex1"].answer_cell].source)
    nb.cells[exercises["ex3"].answer_cell].source = (
        "def average_gradients(replicas):\n    for p in replicas[0].parameters():\n        p.grad = p.grad * 0")
    nb.cells.append(nbformat.v4.new_code_cell('hint("ex3", 1)', execution_count=7))
    nbformat.write(nb, folder / NAME)
    return folder / NAME


def _check_output(out: str) -> None:
    assert "ex1  1 / 1  passed" in out, out
    assert "ex2  0 / 2" in out and "ex04_work/fixed_ddp.py as handed out" in out, out
    assert "ex3  0 / 2, 1 hint(s) opened  check failed: AssertionError: after averaging" in out, out
    assert "total: 1 / 12" in out, out


def test_grade_me_without_the_sandbox_grades_as_trusted_work_and_says_so(tmp_path, capsys):
    notebook = _my_notebook(tmp_path)
    assert main(["--self", str(notebook), "--out", str(tmp_path / "out"), "--sandbox", "none"]) == 0
    out = capsys.readouterr().out
    assert "grading your own notebook as trusted work" in out and "trusted work, no sandbox" in out
    _check_output(out)
    feedback = tmp_path / "out" / "report" / "feedback" / "me" / NAME
    assert feedback.is_file() and "passed" in feedback.read_text(encoding="utf-8")


def test_grade_me_in_the_sandbox(tmp_path):
    sandbox, why = choose_sandbox("auto")
    require("bubblewrap", None if sandbox == "bwrap" else why)
    notebook = _my_notebook(tmp_path)
    done = subprocess.run(["make", "-s", "grade-me", f"NOTEBOOK={notebook}",
                           f"GRADE_FLAGS=--out {tmp_path / 'out'}"], cwd=REPO, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(sandbox):" in done.stdout and "trusted" not in done.stdout
    _check_output(done.stdout)


def test_a_notebook_of_the_chinese_edition_is_graded_against_its_source_and_read_in_chinese(tmp_path, capsys):
    zh = REPO / "chapters" / "zh" / "exercises"
    folder = tmp_path / "chapters" / "zh" / "exercises"
    folder.mkdir(parents=True)
    shutil.copy(zh / "ex01_pytorch_basics.ipynb", folder / "ex01_pytorch_basics.ipynb")
    assert main(["--self", str(folder / "ex01_pytorch_basics.ipynb"), "--out", str(tmp_path / "out"),
                 "--sandbox", "none"]) == 0
    out = capsys.readouterr().out
    assert "未作答" in out and "total: 0 / 10" in out, out


@pytest.mark.parametrize("argv, message", [
    (["--self", "nowhere/ex01_pytorch_basics.ipynb"], "is not a file"),
    (["--self", "README.md"], "is not an exercise notebook"),
    (["--self"], "expected one argument"),
])
def test_bad_input_is_one_line_naming_the_flag(argv, message):
    done = subprocess.run([sys.executable, "-m", "course.grading", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
