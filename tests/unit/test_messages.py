"""course.student.messages: every check message has a Chinese entry, and a Chinese student sees Chinese.

The exercises' code is the same in both editions; their messages are translated when shown, by
``course.student.checks`` in the student's kernel and by the grader in the feedback notebooks.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

import nbformat
import pytest

from course.assignments import (
    exercises_dir,
    exercises_of,
    instructor_sources,
    strip_hidden_tests,
    student_version,
)
from course.grading.classroom import grade_notebook
from course.grading.config import GradingConfig
from course.grading.judges import Run
from course.grading.submission import score
from course.publishing.translate import LANGUAGE, zh_dir
from course.student import checks as checks_module
from course.student.messages import (
    CHINESE,
    ENGLISH,
    LANGUAGE_VARIABLE,
    catalogue,
    message_keys,
    message_language,
    notebook_language,
    translated,
)

SOURCES = instructor_sources()
CJK = re.compile(r"[\u4e00-\u9fff]")
EX01 = "ex01_pytorch_basics.ipynb"
#: The Chinese edition's instructor source of ex01.
ZH_SOURCE = zh_dir() / "exercises" / "solutions" / EX01


def _check_code(path: Path) -> list[str]:
    """The code of a notebook that can fail with a message: every code cell but the answers
    (the student's) and the ``%%writefile`` cells (scripts the checks run, not checks)."""
    nb = nbformat.read(path, as_version=4)
    return [cell.source for cell in nb.cells if cell.cell_type == "code"
            and not cell.get("metadata", {}).get("nbgrader", {}).get("solution")
            and not cell.source.startswith("%%")]


def _used_keys() -> dict[str, str]:
    """Each message key of the exercises' checks and of ``course/student/checks.py``, with where it is."""
    used = {key: Path(checks_module.__file__).name
            for key in message_keys(Path(checks_module.__file__).read_text(encoding="utf-8"))}
    for path in SOURCES:
        used.update({key: path.name for code in _check_code(path) for key in message_keys(code)})
    return used


def test_the_chinese_edition_names_the_language_the_catalogue_is_for():
    assert LANGUAGE == CHINESE


def test_every_message_a_check_can_fail_with_has_a_chinese_entry():
    used, table = _used_keys(), catalogue(CHINESE)
    assert len(used) > 100, "the exercises' messages were not found"
    missing = {key: where for key, where in used.items() if key not in table}
    assert not missing, f"add these to course/student/messages_zh.json: {missing}"


def test_every_chinese_entry_is_chinese_and_keeps_its_values():
    for key, text in catalogue(CHINESE).items():
        assert key.replace("{}", "").strip(), f"{key!r} is only values: it would fit any message"
        assert "{}{}" not in key, f"{key!r}: two values side by side cannot be told apart"
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
        wanted = [str(i) for i in range(key.count("{}"))]
        assert sorted(fields) == wanted, f"{key!r} -> {text!r} must use {wanted} once each"
        assert text != key and not text.isascii(), f"{key!r} -> {text!r} is not translated"


def test_a_message_is_translated_with_its_values_and_the_messages_inside_it():
    assert translated("expected shape (50, 3), got (50,)", CHINESE) == "形状应为 (50, 3)，实际为 (50,)"
    line = "ex1: 0 / 1 points: check failed: AssertionError: column means should be 0"
    assert translated(line, CHINESE) == "ex1：0 / 1 分：检查未通过：AssertionError: 每一列的均值应为 0"
    assert translated(line, ENGLISH) == line
    assert translated("something nobody wrote", CHINESE) == "something nobody wrote"
    long = "expected shape " + ", got " * 5000 + "x"  # an answer's value: matched in linear time
    assert translated(long, CHINESE).startswith("形状应为")


def test_the_language_comes_from_the_notebook(monkeypatch, tmp_path):
    monkeypatch.delenv(LANGUAGE_VARIABLE, raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert message_language() == ENGLISH
    monkeypatch.setenv("JPY_SESSION_NAME", str(zh_dir() / "exercises" / EX01))  # a student version
    assert message_language() == CHINESE
    monkeypatch.setenv("JPY_SESSION_NAME", str(SOURCES[0]))
    assert message_language() == ENGLISH
    monkeypatch.delenv("JPY_SESSION_NAME")
    folder = tmp_path / "chapters" / "zh" / "exercises"
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)  # a kernel starts in its notebook's folder
    assert message_language() == CHINESE
    handed_out = tmp_path / "course" / "week1"  # a student version of the zh edition, elsewhere
    handed_out.mkdir(parents=True)
    nb = nbformat.read(zh_dir() / "exercises" / EX01, as_version=4)  # the committed student version
    nbformat.write(nb, handed_out / EX01)
    monkeypatch.chdir(handed_out)
    assert message_language() == ENGLISH
    monkeypatch.setenv("JPY_SESSION_NAME", f"week1/{EX01}")  # relative to the server's folder
    assert message_language() == CHINESE  # from the notebook's metadata
    monkeypatch.setenv(LANGUAGE_VARIABLE, "fr")
    with pytest.raises(ValueError, match=LANGUAGE_VARIABLE):
        message_language()
    assert notebook_language({"translation": {"language": CHINESE}}) == CHINESE
    assert notebook_language({"translation": "zh-CN"}) == ENGLISH == notebook_language(None)


class Kernel:
    """A student's kernel on the student version of ``notebook``: its first code cell ran (JupyterLab
    names the notebook in ``JPY_SESSION_NAME``); ``check`` runs an answer and the visible checks."""

    def __init__(self, notebook: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(LANGUAGE_VARIABLE, raising=False)
        monkeypatch.setenv("JPY_SESSION_NAME", str(notebook))
        source = nbformat.read(notebook, as_version=4)
        self.nb = student_version(source, name=notebook.name)
        self.exercises = {e.key: e for e in exercises_of(source, name=notebook.name)}
        self.namespace: dict = {}
        exec(next(c.source for c in self.nb.cells if c.cell_type == "code"), self.namespace)

    def check(self, key: str, answer: str = "") -> None:
        """Run ``answer`` (default: the student version's stub), then the exercise's visible checks."""
        exercise = self.exercises[key]
        exec(answer or self.nb.cells[exercise.answer_cell].source, self.namespace)
        exec(strip_hidden_tests(self.nb.cells[exercise.tests_cell].source), self.namespace)


def test_a_failing_visible_check_of_the_chinese_edition_says_why_in_chinese(monkeypatch):
    kernel = Kernel(ZH_SOURCE, monkeypatch)
    with pytest.raises(AssertionError) as failed:
        kernel.check("ex1", "def standardize(x):\n    return x - x.mean(dim=0)\n")
    assert str(failed.value) == "每一列的标准差（correction=0）应为 1"


def test_an_unanswered_exercise_of_the_chinese_edition_is_not_yet_done_in_chinese(monkeypatch, capsys):
    Kernel(ZH_SOURCE, monkeypatch).check("ex2")
    assert capsys.readouterr().out.strip().endswith(
        "练习 2：尚未完成。请在上面的单元格里写好答案并运行，然后再运行这个单元格。")
    Kernel(SOURCES[0], monkeypatch).check("ex2")
    assert "Exercise 2: not yet done." in capsys.readouterr().out


def test_every_score_message_of_the_grader_has_a_chinese_entry():
    exercise = exercises_of(nbformat.read(SOURCES[0], as_version=4))[0]
    runs = [({"check_error": None}, {}), ({"check_error": None, "answer_error": "NameError: x"}, {}),
            ({"check_error": "AssertionError: the gradient is wrong", "answer_error": "NameError: x"}, {}),
            ({"check_error": "NotImplementedError"}, {}), ({"tampered": ["abs"]}, {}),
            ({"check_error": "MemoryError: the memory limit (64 MiB) was reached"}, {})]
    messages = [score(exercise, Run(replies={"ex1": reply}), refused, set()) for reply, refused in runs]
    messages += [score(exercise, Run(fatal={"ex1": "timed out after 6 s"}), {}, set()),
                 score(exercise, Run(), {}, {"ex1"}),
                 score(exercise, Run(), {}, set(), {"ex1": "not attempted (the answer cell is as handed out)"}),
                 score(exercise, Run(changes={"ex1": ["common/models.py"]}), {}, set()),
                 score(exercise, Run(), {"ex1": "line 1 calls code (`f()`): an answer cell may only hold "
                                                "imports, def, class and constant assignments"}, set())]
    for _, message in messages:
        text = translated(message, CHINESE)
        assert CJK.search(text) and not re.search(r"\b(passed|failed|answer cell|not run|limit)\b", text), \
            (message, text)


def _submission(tmp_path: Path, student: str, handed_out: Path) -> Path:
    """The committed student version ``handed_out``, handed in with the instructor's answers (an
    answer cell left as handed out would not reach the judges)."""
    nb = nbformat.read(handed_out, as_version=4)
    source = nbformat.read(SOURCES[0], as_version=4)
    for exercise in exercises_of(source):
        nb.cells[exercise.answer_cell].source = source.cells[exercise.answer_cell].source
    path = tmp_path / "subs" / student / EX01
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("edition", ["en", "zh"])
def test_the_feedback_of_a_chinese_submission_is_chinese(tmp_path, monkeypatch, edition):
    """grade_notebook with the judges' reply given (no process): the feedback's language is the
    submission's, its messages and its markdown; ``grades.csv``'s messages stay English."""
    source = SOURCES[0]
    path = _submission(tmp_path, "student", (zh_dir() / "exercises" if edition == "zh" else exercises_dir()) / EX01)
    failed = {"check_error": "AssertionError: expected shape (50, 3), got (50,)", "tampered": [], "rebound": []}
    run = Run(replies={"ex1": failed, **{f"ex{i}": {"check_error": None} for i in range(2, 6)}})
    monkeypatch.setattr("course.grading.classroom.run_notebook", lambda *args, **kwargs: run)
    config = GradingConfig(submissions=tmp_path / "subs", out=tmp_path / "out")
    results, _ = grade_notebook("student", source, path, config, "none", None)
    assert results[0].message == "check failed: AssertionError: expected shape (50, 3), got (50,)"
    feedback = nbformat.read(tmp_path / "out" / "feedback" / "student" / EX01, as_version=4)
    outputs = [c.outputs[0].text for c in feedback.cells if c.cell_type == "code" and c.outputs]
    markdown = [c.source for c in feedback.cells if c.cell_type == "markdown"]
    read = nbformat.read(path, as_version=4)  # the edition the student worked in
    assert markdown == [c.source for c in read.cells if c.cell_type == "markdown"]
    if edition == "zh":
        assert outputs[0] == "ex1：0 / 1 分：检查未通过：AssertionError: 形状应为 (50, 3)，实际为 (50,)\n"
        assert outputs[1] == "ex2：2 / 2 分：通过\n"
    else:
        assert outputs[0] == "ex1: 0 / 1 points: check failed: AssertionError: expected shape (50, 3), got (50,)\n"
        assert outputs[1] == "ex2: 2 / 2 points: passed\n"
