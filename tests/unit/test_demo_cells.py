"""course.assignments.demo_cells: a cell tagged ``demo`` is skipped by the grader, and a source in which a
later cell needs what a demo cell binds is refused."""

from __future__ import annotations

import nbformat
import pytest

from course.assignments import AssignmentFormatError, exercises_of, instructor_sources, is_demo
from course.grading.submission import judge_requests

ANSWER = {"nbgrader": {"solution": True, "grade": False, "grade_id": "ex1-answer"}}
TESTS = {"nbgrader": {"grade": True, "locked": True, "points": 1, "grade_id": "ex1-tests"}}


def _source(*cells: tuple[str, dict]) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code, metadata=meta) for code, meta in cells])


def _notebook(demo: str, later: str) -> nbformat.NotebookNode:
    return _source(("import torch", {}), ("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION", ANSWER),
                   (demo, {"tags": ["demo"]}), (later, {}),
                   ("with checks('Exercise 1'):\n    assert f() == 1\n### BEGIN HIDDEN TESTS\n"
                    "assert f()\n### END HIDDEN TESTS", TESTS))


def test_a_later_cell_that_needs_a_demo_name_is_refused_naming_both_cells():
    with pytest.raises(AssignmentFormatError, match=r"cell 2: cell 3 uses shown"):
        exercises_of(_notebook("shown = f()\nprint(shown)", "print(shown)"))


def test_names_local_to_a_later_function_are_not_taken_from_the_demo():
    later = "def g(shown):\n    total = shown + 1\n    return total\nfor item in range(2):\n    print(g(item))"
    assert [e.key for e in exercises_of(_notebook("shown = f()\ntotal = 2", later))] == ["ex1"]


def test_a_demo_cell_cannot_be_an_answer_or_check_cell():
    nb = _notebook("print(f())", "print(1)")
    nb.cells[1].metadata["tags"] = ["demo"]
    with pytest.raises(AssignmentFormatError, match="'demo' cell is a plain code cell"):
        exercises_of(nb)


def test_the_grader_sends_every_code_cell_but_the_demos_and_answers():
    nb = _notebook("print(f())", "print(1)")
    requests = judge_requests(nb, exercises_of(nb), {})
    assert [(r["op"], r.get("index", r.get("key"))) for r in requests] == [("setup", 0), ("setup", 3), ("exercise", "ex1")]


@pytest.mark.parametrize("name", ["ex04_distributed_training", "ex05_sharded_data", "ex06_fsdp_checkpoints",
                                  "ex07_your_data"])
def test_the_torchrun_demos_of_the_exercise_notebooks_are_not_graded(name):
    """Each runs the broken script under torchrun (seconds per submission that earn nothing), or shows a
    script of the exercise's folder, which the grader's working copy does not hold."""
    (path,) = [p for p in instructor_sources() if p.stem == name]
    nb = nbformat.read(path, as_version=4)
    demos = [i for i, cell in enumerate(nb.cells) if is_demo(cell)]
    assert demos and all(any(word in nb.cells[i].source for word in ("torchrun", "run_", "show_file(")) for i in demos)
    sent = {r.get("index") for r in judge_requests(nb, exercises_of(nb), {})}
    assert not sent & set(demos)
