"""course.grading.submission and the grader: an answer cell left as handed out is scored "not attempted" without a judge
running it, and a notebook with nothing else to run costs no judge at all."""

from __future__ import annotations

import shutil

import nbformat
import pytest

from course.assignments import exercises_dir, exercises_of, solutions_dir, student_version
from course.grading import classroom, submission
from course.grading.config import GradingConfig
from course.publishing.translate import zh_dir

NAME = "ex01_pytorch_basics.ipynb"


def _submit(tmp_path, student: str, nb: nbformat.NotebookNode):
    (tmp_path / "subs" / student).mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, tmp_path / "subs" / student / NAME)
    return tmp_path / "subs" / student / NAME


def _prepare(tmp_path, nb: nbformat.NotebookNode) -> submission.Prepared:
    path = _submit(tmp_path, "s", nb)
    config = GradingConfig(tmp_path / "subs", tmp_path / "out", trusted=True, sandbox="none")
    prepared = submission.prepare("s", solutions_dir() / NAME, path, config)
    assert isinstance(prepared, submission.Prepared)
    return prepared


@pytest.mark.parametrize("edition", ["en", "zh"])
def test_a_student_version_as_handed_out_needs_no_judge(tmp_path, edition):
    """Both editions' committed student versions (the zh one with translated comments)."""
    folder = exercises_dir() if edition == "en" else zh_dir() / "exercises"
    prepared = _prepare(tmp_path, nbformat.read(folder / NAME, as_version=4))
    keys = [e.key for e in prepared.exercises]
    assert sorted(prepared.unattempted) == sorted(keys)
    assert not prepared.needs_judge
    assert [r["key"] for r in prepared.requests if r["op"] == "answer"] == keys
    assert {prepared.unattempted[k] for k in keys} <= {"not attempted (NotImplementedError)",
                                                       "not attempted (the answer cell is as handed out)"}


def test_only_the_changed_answers_are_run_and_the_rest_are_recorded_for_them(tmp_path):
    source = nbformat.read(solutions_dir() / NAME, as_version=4)
    student = student_version(source)
    first, *rest = exercises_of(source)
    student.cells[first.answer_cell].source = source.cells[first.answer_cell].source  # the solution
    last = rest[-1]
    student.cells[last.answer_cell].source = "# only a comment added\n" + student.cells[last.answer_cell].source
    prepared = _prepare(tmp_path, student)
    assert prepared.needs_judge and first.key not in prepared.unattempted
    assert last.key in prepared.unattempted, "a comment is not an attempt"
    ops = {r["key"]: r["op"] for r in prepared.requests if "key" in r}
    assert ops == {first.key: "exercise"} | {e.key: "answer" for e in rest}
    assert [r["index"] for r in prepared.requests if r["op"] == "setup"], "the setup cells still run"


def test_an_answer_that_only_looks_like_the_stub_is_run(tmp_path):
    source = nbformat.read(solutions_dir() / NAME, as_version=4)
    student = student_version(source)
    first = exercises_of(source)[0]
    student.cells[first.answer_cell].source = student.cells[first.answer_cell].source.replace(
        "raise NotImplementedError()", "raise NotImplementedError('later')")
    assert first.key not in _prepare(tmp_path, student).unattempted


def test_a_blank_submission_is_graded_without_starting_a_judge(tmp_path, monkeypatch):
    def no_judge(*args, **kwargs):
        raise AssertionError("a judge was started for a notebook with nothing to run")

    monkeypatch.setattr(classroom, "run_notebooks", no_judge)
    monkeypatch.setattr(classroom, "run_notebook", no_judge)
    monkeypatch.setattr(classroom, "choose_sandbox", lambda wanted: ("none", "no sandbox in this test"))
    monkeypatch.setattr(classroom, "own_uids", lambda config, sandbox: (None, ""))
    monkeypatch.setattr(classroom, "file_guard", lambda config: None)
    monkeypatch.setattr(classroom, "may_drop", lambda config, sandbox: False)
    sources = tmp_path / "sources"
    sources.mkdir()
    shutil.copy(solutions_dir() / NAME, sources / NAME)
    _submit(tmp_path, "blank", nbformat.read(exercises_dir() / NAME, as_version=4))
    config = GradingConfig(tmp_path / "subs", tmp_path / "out", sources=sources, trusted=True, sandbox="none")
    results, _ = classroom.grade(config)
    assert len(results) == len(exercises_of(nbformat.read(sources / NAME, as_version=4)))
    assert all(r.points == 0 and r.message.startswith("not attempted") for r in results), results
