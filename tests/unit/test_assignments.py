"""course.assignments: instructor sources follow the conventions; student versions are safe to hand out,
and the committed ones (what the chapters link and learners open) are exactly what `make assignments` writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course.assignments import (
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    NOT_DONE,
    AssignmentFormatError,
    answer_files,
    exercises_dir,
    exercises_of,
    instructor_sources,
    nbgrader_meta,
    rebase_links,
    solutions_dir,
    strip_hidden_tests,
    strip_solutions,
    student_text,
    student_version,
    work_files,
    write_work_files,
)
from course.assignments.__main__ import main
from course.publishing import code_comments
from course.publishing.translate import zh_dir
from course.student.checks import HINTS, answered, checks, hint_texts, hints
from course.student.messages import CHINESE
from tests.helpers import solution_lines
from tests.notebook_parameters import apply_parameters

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCES = instructor_sources()
#: The learner's folders of both editions, each with its instructor sources in solutions/.
LEARNER_FOLDERS = (exercises_dir(), zh_dir() / "exercises")
#: A line the grader, ``strip_solutions`` or the learner finds by its English marker.
MARKER_LINE = re.compile(r"### (BEGIN|END) (SOLUTION|HIDDEN TESTS)|YOUR CODE HERE")
CHAPTERS = ("ex01_", "ex02_", "ex03_", "ex04_", "ex05_", "ex06_", "ex07_")


def test_every_chapter_has_an_exercise_notebook_with_at_least_four_exercises():
    assert [p.name[:5] for p in SOURCES] == list(CHAPTERS)
    for path in SOURCES:
        exercises = exercises_of(nbformat.read(path, as_version=4), name=path.name)
        assert len(exercises) >= 4, path.name
        assert len({e.key for e in exercises}) == len(exercises)


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_sources_carry_nbgrader_metadata_nbgrader_accepts(path):
    nb = nbformat.read(path, as_version=4)
    ids = [nbgrader_meta(c)["grade_id"] for c in nb.cells if nbgrader_meta(c)]
    assert len(ids) == len(set(ids)), "grade_id must be unique within a notebook"
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta:
            assert set(meta) >= {"grade", "grade_id", "locked", "schema_version", "solution", "task"}
            assert meta["schema_version"] == 3
            assert not (meta["grade"] and meta["solution"]), "answer and checks live in separate cells"
            if meta["grade"]:
                assert meta["locked"] and meta["points"] > 0


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_points_in_the_headings_match_the_metadata(path):
    nb = nbformat.read(path, as_version=4)
    stated = [int(m) for c in nb.cells if c.cell_type == "markdown"
              for m in re.findall(r"^## Exercise \d+ — .* · (\d+) points?(?: · [★☆]{3} · ~\d+ min)?$", c.source, re.M)]
    recorded = [e.points for e in exercises_of(nb, name=path.name)]
    assert stated == recorded


def test_strip_solutions_keeps_indentation_and_uses_ellipsis_for_simple_assignments():
    source = "def f(x):\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n    ### END SOLUTION\n"
    assert strip_solutions(source) == "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    simple = "### BEGIN SOLUTION\nnum_workers = 2\nlr = 0.1\n### END SOLUTION\nprint(lr)"
    assert strip_solutions(simple) == ("num_workers = ...  # YOUR CODE HERE\n"
                                       "lr = ...  # YOUR CODE HERE\nprint(lr)")
    with pytest.raises(AssignmentFormatError):
        strip_solutions("### BEGIN SOLUTION\nx = 1\n")
    with pytest.raises(AssignmentFormatError):
        strip_solutions("x = 1\n### END SOLUTION\n")


def test_strip_hidden_tests_removes_the_block_and_its_markers():
    source = f"with checks('E'):\n    assert f(1) == 2\n{BEGIN_HIDDEN}\nassert f(2) == 3\n### END HIDDEN TESTS\n"
    assert strip_hidden_tests(source) == "with checks('E'):\n    assert f(1) == 2"


def test_exercises_of_refuses_a_check_cell_without_points_or_hidden_tests():
    answer = nbformat.v4.new_code_cell(f"{BEGIN_SOLUTION}\nx = 1\n### END SOLUTION", metadata={
        "nbgrader": {"grade": False, "grade_id": "e1-answer", "solution": True, "locked": False}})
    tests = nbformat.v4.new_code_cell("with checks('E'):\n    assert x == 1", metadata={
        "nbgrader": {"grade": True, "grade_id": "e1-tests", "solution": False, "points": 1}})
    nb = nbformat.v4.new_notebook(cells=[answer, tests])
    with pytest.raises(AssignmentFormatError, match="HIDDEN"):
        exercises_of(nb)
    tests.source += f"\n{BEGIN_HIDDEN}\nassert x\n### END HIDDEN TESTS"
    assert [e.key for e in exercises_of(nb)] == ["e1"]
    tests.metadata["nbgrader"]["points"] = 0
    with pytest.raises(AssignmentFormatError, match="points"):
        exercises_of(nb)
    tests.metadata["nbgrader"]["points"] = 1
    del nb.cells[0]
    with pytest.raises(AssignmentFormatError, match="answer cell"):
        exercises_of(nb)


def test_checks_reports_not_yet_done_but_lets_wrong_answers_fail(capsys):
    with checks("Exercise 9"):
        raise NotImplementedError()
    assert "Exercise 9: not yet done" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="wrong"), checks("Exercise 9"):
        raise AssertionError("wrong")
    with checks("Exercise 9"):
        answered(1, "x")
    assert "visible checks passed" in capsys.readouterr().out
    with pytest.raises(NotImplementedError):
        answered(1, ...)


@pytest.mark.parametrize("mode", ["validate", "autograde"])
def test_checks_lets_not_yet_done_fail_under_nbgrader(mode, monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", mode)  # what nbgrader validate/autograde set
    with pytest.raises(NotImplementedError), checks("Exercise 9"):
        answered(...)
    assert "not yet done" not in capsys.readouterr().out
    monkeypatch.delenv("NBGRADER_EXECUTION")
    with checks("Exercise 9"):
        answered(...)
    assert "Exercise 9: not yet done" in capsys.readouterr().out


def test_the_instructor_sources_live_apart_in_solutions():
    assert SOURCES and all(p.parent == solutions_dir() == exercises_dir() / "solutions" for p in SOURCES)
    assert all(p.with_suffix(".py").is_file() for p in SOURCES), "an instructor source has its twin"


@pytest.mark.parametrize("folder", LEARNER_FOLDERS, ids=["en", "zh"])
def test_the_committed_student_versions_are_what_make_assignments_writes(folder):
    """Byte for byte: each student version equals the build of its instructor source, and there is
    one for every source and none without one."""
    sources = instructor_sources(folder / "solutions")
    assert [p.name for p in sources] == [p.name for p in SOURCES]
    assert sorted(p.name for p in folder.glob("*.ipynb")) == [p.name for p in sources]
    for source in sources:
        assert (folder / source.name).read_text(encoding="utf-8") == student_text(source, folder), \
            f"{folder / source.name} is out of date: run `make assignments` (zh: `make translations`)"
    assert not list(folder.glob("*.py")) and not (folder / "manifest.json").exists()


@pytest.mark.parametrize("folder", LEARNER_FOLDERS, ids=["en", "zh"])
def test_no_learner_notebook_holds_a_solution_or_a_hidden_check(folder):
    for source in instructor_sources(folder / "solutions"):
        secret = solution_lines(nbformat.read(source, as_version=4))
        assert len(secret) > 10, f"{source.name}: the solutions were not found"
        text = (folder / source.name).read_text(encoding="utf-8")
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text and "END HIDDEN" not in text
        student = nbformat.read(folder / source.name, as_version=4)
        shown = {line.strip() for cell in student.cells for line in cell.source.splitlines()}
        assert not secret & shown, f"{folder.name}/{source.name} shows {sorted(secret & shown)[:3]}"
        assert all(not c.outputs for c in student.cells if c.cell_type == "code"), "outputs show solutions"


def test_links_are_rebased_and_point_a_student_version_at_student_versions(tmp_path):
    source, out = tmp_path / "chapters" / "zh" / "exercises" / "solutions", tmp_path / "chapters" / "zh" / "exercises"
    text = ("[g](../../../../GLOSSARY.md#top) [en](../../../exercises/solutions/ex01_a.ipynb) "
            "[here](#how) [web](https://x.y/a) ![p](../../../figures/p.svg) [c](../../../01_a.ipynb)")
    assert rebase_links(text, source, out) == (
        "[g](../../../GLOSSARY.md#top) [en](../../exercises/ex01_a.ipynb) [here](#how) [web](https://x.y/a) "
        "![p](../../figures/p.svg) [c](../../01_a.ipynb)")
    assert rebase_links(text, source, source) == text.replace("exercises/solutions/ex01_a", "exercises/ex01_a")


def test_the_student_versions_first_cells_say_how_to_check_and_where_the_solutions_are():
    for path in sorted(exercises_dir().glob("ex*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        text = nb.cells[0].source + nb.cells[1].source
        assert "raise NotImplementedError()" in text and "raise NotImplementedError()" in "".join(
            c.source for c in nb.cells if c.cell_type == "code"), "the text says what the cells hold"
        assert f"make grade-me NOTEBOOK=chapters/exercises/{path.name}" in text, "one command grades it in place"
        assert f"chapters/exercises/solutions/{path.name}" in text
        assert (REPO_ROOT / f"chapters/exercises/solutions/{path.name}").is_file()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("assignments")
    assert main(["build", "--out", str(out)]) == 0
    return out


def test_build_writes_student_versions_without_solutions_or_hidden_tests(built):
    manifest = json.loads((built / "manifest.json").read_text())
    assert sorted(manifest) == [p.stem for p in SOURCES]
    for path in SOURCES:
        source = nbformat.read(path, as_version=4)
        student = nbformat.read(built / path.name, as_version=4)
        assert len(student.cells) == len(source.cells)
        text = "\n".join(c.source for c in student.cells)
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
        for exercise in exercises_of(source, name=path.name):
            solution = source.cells[exercise.answer_cell].source
            if exercise.files:  # a file exercise: its answer cell says where the answer is, in both
                assert student.cells[exercise.answer_cell].source == solution and BEGIN_SOLUTION not in solution
                assert all((built / f).is_file() for f in exercise.files), exercise.files
                continue
            body = solution.split(BEGIN_SOLUTION)[1].split("### END SOLUTION")[0].strip()
            assert body.splitlines()[0].strip() not in student.cells[exercise.answer_cell].source
            assert nbgrader_meta(student.cells[exercise.tests_cell])["points"] == exercise.points
            assert student.cells[exercise.tests_cell].metadata["editable"] is False
        assert all(c.outputs == [] and c.execution_count is None
                   for c in student.cells if c.cell_type == "code")
        assert manifest[path.stem]["total_points"] == sum(
            e.points for e in exercises_of(source, name=path.name))


@pytest.fixture(scope="module")
def student_runs(built):
    """Every student version executed top to bottom, in order, all in one kernel.

    ex01 runs first in a fresh kernel, exactly as nbval would run it; each later notebook
    starts with ``%reset -f`` (an empty namespace) in the same kernel, so torch and
    ``common`` are imported once instead of five times. Errors are recorded, not raised,
    so that each notebook is judged on its own cells. A notebook's parameters cell has its
    test sizes, as nbval's runs of the chapters have (tests/notebook_parameters.py).
    """
    cells, spans = [], {}
    for path in sorted(built.glob("ex*.ipynb")):
        nb = apply_parameters(nbformat.read(path, as_version=4), path)
        cells.append(nbformat.v4.new_code_cell(f"%reset -f\nimport os\nos.chdir({str(built)!r})"))
        spans[path.name] = (len(cells), len(cells) + len(nb.cells))
        cells += nb.cells
    combined = nbformat.v4.new_notebook(cells=cells, metadata=nb.metadata)
    NotebookClient(combined, timeout=180, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(built)}}).execute()
    return {name: combined.cells[start:stop] for name, (start, stop) in spans.items()}


def test_student_version_of_a_source_changes_nothing_in_the_source():
    source = nbformat.read(SOURCES[0], as_version=4)
    before = json.dumps(source, sort_keys=True)
    student_version(source)
    assert json.dumps(source, sort_keys=True) == before


def test_a_solution_that_is_a_whole_class_body_is_refused():
    answer = nbformat.v4.new_code_cell(
        f"class T:\n    {BEGIN_SOLUTION}\n    def f(self):\n        return 1\n    ### END SOLUTION",
        metadata={"nbgrader": {"grade": False, "grade_id": "e1-answer", "solution": True}})
    tests = nbformat.v4.new_code_cell(
        f"with checks('E'):\n    assert T().f() == 1\n{BEGIN_HIDDEN}\nassert T()\n### END HIDDEN TESTS",
        metadata={"nbgrader": {"grade": True, "grade_id": "e1-tests", "solution": False, "points": 1}})
    nb = nbformat.v4.new_notebook(cells=[answer, tests])
    with pytest.raises(AssignmentFormatError, match="inside its methods"):
        student_version(nb)
    answer.source = answer.source.replace(f"    {BEGIN_SOLUTION}\n    def f(self):\n",
                                          f"    def f(self):\n        {BEGIN_SOLUTION}\n")
    answer.source = answer.source.replace("    ### END SOLUTION", "        ### END SOLUTION")
    assert "raise NotImplementedError()" in student_version(nb).cells[0].source


# Exercises a self-learner can finish alone.

def _exercise_text(nb: nbformat.NotebookNode, exercise, previous: int) -> str:
    """The markdown an exercise is stated in: every markdown cell after the previous check cell up to
    its answer cell, whitespace folded."""
    cells = nb.cells[previous + 1:exercise.answer_cell]
    return " ".join(" ".join(c.source.split()) for c in cells if c.cell_type == "markdown")


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_every_heading_gives_difficulty_and_time(path):
    nb = nbformat.read(path, as_version=4)
    headings = [m for c in nb.cells if c.cell_type == "markdown"
                for m in re.findall(r"^## Exercise \d+ — .*$", c.source, re.M)]
    assert len(headings) == len(exercises_of(nb, name=path.name))
    for heading in headings:
        assert re.search(r" · (★☆☆|★★☆|★★★) · ~\d+ min$", heading), f"{path.name}: {heading}"


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_every_exercise_above_one_point_has_stepped_hints_in_both_editions(path, capsys, monkeypatch):
    """2-3 hints from a nudge to the near answer, in English and in Chinese written apart (not a copy)."""
    table = json.loads(HINTS.read_text(encoding="utf-8"))
    nb = nbformat.read(path, as_version=4)
    for exercise in exercises_of(nb, name=path.name):
        entry = table.get(path.stem, {}).get(exercise.key)
        if exercise.points <= 1:
            continue
        assert entry, f"{path.stem} {exercise.key} ({exercise.points:g} points) has no hints"
        english, chinese = entry["en"], entry[CHINESE]
        assert 2 <= len(english) <= 3 and len(chinese) == len(english), (path.stem, exercise.key)
        assert all(re.search(r"[\u4e00-\u9fff]", text) for text in chinese), (path.stem, exercise.key)
        assert len(set(english)) == len(english) and all(len(text) > 40 for text in english)
    code = "".join(c.source for c in nb.cells if c.cell_type == "code")
    assert f'hint = hints("{path.stem}")' in code, "the first cell binds hint for this notebook"
    monkeypatch.setenv("COURSE_LANGUAGE", CHINESE)
    key = next(k for k, v in table[path.stem].items())
    hints(path.stem)(key, 1)
    shown = capsys.readouterr().out
    assert hint_texts(path.stem, key, CHINESE)[0] in shown and "提示 1" in shown


def test_a_hint_is_shown_one_at_a_time_and_points_to_the_next(capsys):
    hint = hints("ex04_distributed_training")
    hint("ex2", 1)
    out = capsys.readouterr().out
    first, second = hint_texts("ex04_distributed_training", "ex2", "en")[:2]
    assert first in out and second not in out and 'hint("ex2", 2)' in out
    hint("ex2", 9)
    assert "has hints 1 to 3" in capsys.readouterr().out
    hint("ex1", 1)
    assert "has no hints" in capsys.readouterr().out


REQUIREMENTS = exercises_dir() / "requirements.json"


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_every_stated_requirement_has_a_visible_check(path):
    """The reviewed list (chapters/exercises/requirements.json): each requirement the exercise's text
    states (quoted from it) names the visible check that tests it (a piece of the check cell's visible
    code: ``with checks(...)`` and the helpers it calls). Hidden checks only try other cases of these."""
    table = json.loads(REQUIREMENTS.read_text(encoding="utf-8"))
    if path.stem not in table:
        pytest.skip(f"{path.stem}: its requirements are not listed yet (issue 45)")
    nb = nbformat.read(path, as_version=4)
    previous = -1
    for exercise in exercises_of(nb, name=path.name):
        listed = table[path.stem].get(exercise.key)
        assert listed, f"{path.stem} {exercise.key}: no requirement listed"
        text = _exercise_text(nb, exercise, previous)
        visible = " ".join(strip_hidden_tests(nb.cells[exercise.tests_cell].source).split())  # what the learner sees
        for quote, check in listed:
            assert " ".join(quote.split()) in text, f"{path.stem} {exercise.key}: the text does not say {quote!r}"
            assert " ".join(check.split()) in visible, \
                f"{path.stem} {exercise.key}: no visible check {check!r} for {quote!r}"
        previous = exercise.tests_cell


@pytest.mark.parametrize("folder", LEARNER_FOLDERS, ids=["en", "zh"])
def test_the_committed_answer_files_are_what_make_assignments_writes(folder, tmp_path):
    """A file exercise hands out its file (the broken script with a first line that raises, or the
    module with its solution cut out) beside the student version; the scripts it runs too."""
    found = 0
    for source in instructor_sources(folder / "solutions"):
        nb = nbformat.read(source, as_version=4)
        exercises = exercises_of(nb, name=source.name)
        for path in write_work_files(tmp_path, source, exercises):
            relative = path.relative_to(tmp_path)
            assert (folder / relative).read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), \
                f"{folder / relative} is out of date: run `make assignments`"
        for exercise in exercises:
            for relative, start in answer_files(nb.cells[exercise.answer_cell]).items():
                found += 1
                handed = (folder / relative).read_text(encoding="utf-8")
                solution = (folder / "solutions" / relative).read_text(encoding="utf-8")
                assert "NotImplementedError" in handed and handed != solution
                assert BEGIN_SOLUTION not in handed
                if start:
                    assert handed == NOT_DONE + (folder / "solutions" / start).read_text(encoding="utf-8")
    assert found == 6, "ex04 Exercise 2, ex05 Exercise 7, ex06 Exercises 6, 8 and 9, ex07 Exercise 5 take files"


def test_both_editions_run_the_same_scripts():
    """The Chinese work files are the English ones with Chinese comments and docstrings: the same code, the
    same solution and hidden-test markers, the same ``# YOUR CODE HERE``."""
    for source in SOURCES:
        english = work_files(source.parent, source.stem)
        chinese = work_files(zh_dir() / "exercises" / "solutions", source.stem)
        assert [p.name for p in english] == [p.name for p in chinese]
        for a, b in zip(english, chinese, strict=True):
            en, zh = a.read_text(encoding="utf-8"), b.read_text(encoding="utf-8")
            assert code_comments.strip(zh) == code_comments.strip(en), f"{b}'s code differs from {a}'s"
            assert [line for line in zh.splitlines() if MARKER_LINE.search(line)] == \
                [line for line in en.splitlines() if MARKER_LINE.search(line)], f"{b} lost a marker of {a}"


def test_an_answer_file_must_be_a_path_inside_the_notebooks_folder():
    answer = nbformat.v4.new_code_cell("# the answer is a file", metadata={
        "nbgrader": {"grade": False, "grade_id": "e1-answer", "solution": True}, "tags": ["answer-file:../escape.py"]})
    tests = nbformat.v4.new_code_cell(
        f"with checks('E'):\n    pass\n{BEGIN_HIDDEN}\npass\n### END HIDDEN TESTS",
        metadata={"nbgrader": {"grade": True, "grade_id": "e1-tests", "solution": False, "points": 1}})
    with pytest.raises(AssignmentFormatError, match="inside the notebook's folder"):
        exercises_of(nbformat.v4.new_notebook(cells=[answer, tests]))
    answer.metadata["tags"] = ["answer-file:ex01_work/a.py"]
    assert exercises_of(nbformat.v4.new_notebook(cells=[answer, tests]))[0].files == ("ex01_work/a.py",)
