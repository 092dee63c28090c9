"""File exercises on the grader's side: the answer file is taken from beside the submitted notebook
(never through a link, never bigger than allowed, "not attempted" when it is as handed out), the judge
writes it only inside its working copy, and the hints a student opened are recorded from the cells that
ran."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from course.assignments import MAX_ANSWER_FILE, exercises_of, handout_text, solutions_dir
from course.grading.config import GradingConfig
from course.grading.inside.judge import place_files
from course.grading.submission import hints_opened, prepare, submitted_files

SOURCE = solutions_dir() / "ex04_distributed_training.ipynb"
ANSWER = "ex04_work/fixed_ddp.py"


def _handed_in(tmp_path: Path, text: str | None) -> Path:
    """A student folder with the committed ex04 student version and, unless None, its answer file."""
    folder = tmp_path / "subs" / "me"
    (folder / "ex04_work").mkdir(parents=True)
    student = solutions_dir().parent / SOURCE.name
    (folder / SOURCE.name).write_bytes(student.read_bytes())
    if text is not None:
        (folder / ANSWER).write_text(text, encoding="utf-8")
    return folder


def _files(folder: Path):
    source = nbformat.read(SOURCE, as_version=4)
    return submitted_files(SOURCE, source, exercises_of(source), folder)


def test_an_answer_file_is_taken_from_beside_the_notebook(tmp_path):
    solution = (solutions_dir() / ANSWER).read_text(encoding="utf-8")
    files, problems = _files(_handed_in(tmp_path, solution))
    broken = (solutions_dir() / "ex04_work" / "broken_ddp.py").read_text(encoding="utf-8")
    assert files == {"ex2": {"ex04_work/broken_ddp.py": broken, ANSWER: solution}} and problems == {}, \
        "the answer file, and the instructor's scripts of the notebook beside it"


def test_an_answer_file_as_handed_out_or_missing_is_not_run(tmp_path):
    handed = handout_text(solutions_dir(), ANSWER, "ex04_work/broken_ddp.py")
    files, problems = _files(_handed_in(tmp_path / "a", "# a comment only changes nothing\n" + handed))
    assert files == {} and problems == {"ex2": f"not attempted ({ANSWER} as handed out)"}
    files, problems = _files(_handed_in(tmp_path / "b", None))
    assert files == {} and "the answer file ex04_work/fixed_ddp.py is missing" in problems["ex2"]


def test_a_submitted_script_beside_the_answer_is_never_taken(tmp_path):
    """Only the answer files come from the submission: a broken_ddp.py of the student's is replaced by
    the instructor's (a check runs it as given)."""
    solution = (solutions_dir() / ANSWER).read_text(encoding="utf-8")
    folder = _handed_in(tmp_path, solution)
    (folder / "ex04_work" / "broken_ddp.py").write_text("print('mine')\n")
    files, _ = _files(folder)
    assert files["ex2"]["ex04_work/broken_ddp.py"] == (solutions_dir() / "ex04_work" / "broken_ddp.py").read_text()


def test_an_answer_file_that_is_a_link_or_too_big_is_refused(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("print('the instructor key')\n")
    folder = _handed_in(tmp_path / "a", None)
    (folder / ANSWER).symlink_to(secret)
    files, problems = _files(folder)
    assert files == {} and "symbolic link" in problems["ex2"]
    folder = _handed_in(tmp_path / "b", None)
    os.rmdir(folder / "ex04_work")
    (folder / "ex04_work").symlink_to(secret.parent, target_is_directory=True)
    (secret.parent / "fixed_ddp.py").write_text("x = 1\n")
    files, problems = _files(folder)
    assert files == {} and "symbolic link" in problems["ex2"]
    files, problems = _files(_handed_in(tmp_path / "c", "#" * (MAX_ANSWER_FILE + 1)))
    assert files == {} and "more than the" in problems["ex2"]


def test_prepare_records_the_file_and_sends_it_with_its_exercise_only(tmp_path):
    solution = (solutions_dir() / ANSWER).read_text(encoding="utf-8")
    folder = _handed_in(tmp_path, solution)
    config = GradingConfig(submissions=tmp_path / "subs", out=tmp_path / "out")
    prepared = prepare("me", SOURCE, folder / SOURCE.name, config)
    assert "ex2" not in prepared.unattempted
    sent = {r["key"]: r.get("files") for r in prepared.requests if r["op"] == "exercise"}
    assert list(sent) == ["ex2"] and sent["ex2"][ANSWER] == solution, "only ex2 is answered and it carries its file"


def test_the_judge_writes_an_answer_file_only_inside_its_working_copy(tmp_path):
    root = tmp_path / "work"
    (root / "ex04_work").mkdir(parents=True)
    assert place_files(str(root), {ANSWER: "x = 1\n"}) is None
    assert (root / ANSWER).read_text() == "x = 1\n"
    assert "is there" in place_files(str(root), {ANSWER: "y = 2\n"}) or "exists" in place_files(
        str(root), {ANSWER: "y = 2\n"}), "an existing file is never overwritten"
    for bad in ("../out.py", "/etc/x.py", "a/../../out.py", ""):
        assert "not a path inside the working copy" in place_files(str(root), {bad: "z"}), bad
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "linked").symlink_to(outside, target_is_directory=True)
    assert "is not a folder of the working copy" in place_files(str(root), {"linked/a.py": "z"})
    assert not list(outside.iterdir())


def test_the_hints_opened_are_the_highest_level_of_a_hint_cell_that_ran():
    ran = nbformat.v4.new_code_cell('hint("ex2", 1)\nhint("ex2", 2)', execution_count=3)
    not_run = nbformat.v4.new_code_cell('hint("ex3", 3)')
    other = nbformat.v4.new_code_cell('hint("ex4", 1); print(hint)', execution_count=4)
    odd = nbformat.v4.new_code_cell('hint(key, 1); hint("ex5", 99); hint("ex6")', execution_count=5)
    nb = nbformat.v4.new_notebook(cells=[ran, not_run, other, odd, nbformat.v4.new_markdown_cell('hint("ex7", 1)')])
    assert hints_opened(nb) == {"ex2": 2, "ex4": 1}


@pytest.mark.parametrize("cost, expected", [(0.0, 2.0), (0.5, 1.0), (5.0, 0.0)])
def test_opened_hints_change_a_score_only_where_the_instructor_asks(tmp_path, monkeypatch, cost, expected):
    from course.grading import classroom
    from course.grading.judges import Run

    solution = (solutions_dir() / ANSWER).read_text(encoding="utf-8")
    folder = _handed_in(tmp_path, solution)
    nb = nbformat.read(folder / SOURCE.name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell('hint("ex2", 1)\nhint("ex2", 2)', execution_count=1))
    nbformat.write(nb, folder / SOURCE.name)
    monkeypatch.setattr(classroom, "run_notebook", lambda *a, **k: Run(replies={"ex2": {"check_error": None}}))
    config = GradingConfig(submissions=tmp_path / "subs", out=tmp_path / "out", hint_cost=cost)
    rows, _ = classroom.grade_notebook("me", SOURCE, folder / SOURCE.name, config, "none", None)
    row = next(r for r in rows if r.exercise.endswith("/ex2"))
    assert row.points == expected and (cost == 0) == ("hint" not in row.message), row
