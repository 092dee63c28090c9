"""course.grading (the grader): prepared submissions grade to the expected points; broken ones are contained."""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import pickle
import shutil
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from course.assignments import exercises_dir, exercises_of, solutions_dir, student_version
from course.grading.classroom import SandboxRequired, grade, main
from course.grading.config import GradingConfig
from course.grading.judges import Run
from course.grading.report import write_report
from course.grading.submission import graded_notebook, read_submission, score
from course.publishing.translate import zh_dir
from tests.fixtures.submissions.hostile import HOSTILE, HOSTILE_POINTS
from tests.fixtures.submissions.make_submissions import with_answers
from tests.system_parts import require_bubblewrap

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "submissions"
#: Points each prepared submission must score; written by fixtures/submissions/make_submissions.py.
EXPECTED: dict[str, int] = json.loads((FIXTURES / "expected.json").read_text())
NAME = "ex01_pytorch_basics.ipynb"

REPO = Path(__file__).resolve().parents[2]
#: dave's endless loop costs this much, once (it sleeps: wall time, not CPU). Other exercise cells take
#: < 0.3 s on a quiet machine and up to 2.5 s on an overloaded one: a shorter limit would make the test flaky.
CELL_TIMEOUT = 6
#: The submissions are graded by two graders side by side (one per core): one sandboxed where
#: bwrap works, one without a sandbox and with ``--trusted`` (where only the file guard stands
#: between eve and the instructor's files). The hostile students (tests/fixtures/submissions/
#: hostile.py, and links) and after them an honest student, who must get full marks whatever they
#: did, are graded in the sandbox only: untrusted input is graded there, and grading
#: without it is for trusted input. The unsandboxed grader takes the honest and broken fixtures,
#: dave's timeout and second run, eve and h4_files (whose file changes it must detect and undo).
ATTACKERS = (*HOSTILE, "h5_symlink", "h6_hardlink", "h11_fifo")
#: A folder name that is not UTF-8 (byte 0xE9), as Python names it: an honest student's.
ODD_NAME = "h12_caf\udce9"
#: A student of the Chinese edition (chapters/zh/exercises/), one answer wrong: the feedback speaks Chinese.
CHINESE_STUDENT = "xiaoming"
WRONG_EX1 = "def standardize(x):\n    return x - x.mean(dim=0)\n"
SANDBOXED = ("eve", "mallory", *ATTACKERS, ODD_NAME, CHINESE_STUDENT, "zz_honest")
UNSANDBOXED = ("alice", "blank", "bob", "carol", "dave", "eve", "h4_files", "zz_honest")


def _copy_repo(root: Path) -> Path:
    """What a graded kernel could look for: `common`, `course`, the ex01 source (and the student
    versions of both editions: what students open, and the zh feedback's markdown), fixtures and git."""
    for package in ("common", "course"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    (root / "chapters" / "exercises" / "solutions").mkdir(parents=True)
    for suffix in (".ipynb", ".py"):
        shutil.copy(solutions_dir() / NAME.replace(".ipynb", suffix), root / "chapters" / "exercises" / "solutions")
    shutil.copy(exercises_dir() / NAME, root / "chapters" / "exercises")
    (root / "chapters" / "zh" / "exercises" / "solutions").mkdir(parents=True)
    shutil.copy(zh_dir() / "exercises" / NAME, root / "chapters" / "zh" / "exercises")
    shutil.copy(zh_dir() / "exercises" / "solutions" / NAME, root / "chapters" / "zh" / "exercises" / "solutions")
    shutil.copytree(FIXTURES, root / "tests" / "fixtures" / "submissions",
                    ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "solutions"]):
        subprocess.run([*git, *command], cwd=root, check=True, capture_output=True)
    return root


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _submissions(root: Path, students: tuple[str, ...], repo: Path, fill: dict[str, str]) -> Path:
    source = nbformat.read(repo / "chapters" / "exercises" / "solutions" / NAME, as_version=4)
    for student in students:
        folder = root / student
        folder.mkdir(parents=True)
        if student in EXPECTED:
            shutil.copy(FIXTURES / student / (NAME + ".json"), folder / NAME)
        elif student == "blank":  # the student version, handed in untouched
            shutil.copy(repo / "chapters" / "exercises" / NAME, folder / NAME)
        elif student == "mallory":  # not a notebook at all
            (folder / NAME).write_text('{"cells": [ this is not json')
        elif student == "h5_symlink":  # the instructor's source, through a link
            (folder / NAME).symlink_to(repo / "chapters" / "exercises" / "solutions" / NAME)
        elif student == "h6_hardlink":
            os.link(repo / "chapters" / "exercises" / "solutions" / NAME, folder / NAME)
        elif student == "h11_fifo":  # opening it for reading would wait for a writer forever
            os.mkfifo(folder / NAME)
        elif student == CHINESE_STUDENT:
            zh = nbformat.read(repo / "chapters" / "zh" / "exercises" / "solutions" / NAME, as_version=4)
            nbformat.write(with_answers(zh, {"ex1": WRONG_EX1, "ex2": None}, fill), folder / NAME)
        elif student in HOSTILE:
            nbformat.write(with_answers(source, HOSTILE[student], fill), folder / NAME)
        else:  # zz_honest and ODD_NAME: every answer right
            nbformat.write(with_answers(source, dict.fromkeys(("ex1", "ex2", "ex3", "ex4", "ex5")), fill),
                           folder / NAME)
    return root


class _Listener:
    """A server on 127.0.0.1 that records whatever connects to it (nothing should)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port, self.received, self.stop = self.server.getsockname()[1], [], False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                connection, _ = self.server.accept()
            except OSError:
                continue
            with connection:
                self.received.append(connection.recv(100))

    def close(self) -> list[bytes]:
        self.stop = True
        self.thread.join()
        self.server.close()
        return self.received


def _grade_copy(root: Path, students: tuple[str, ...], sandbox: str) -> dict:
    """Grade ``students`` against a private copy of the repository; report its hashes too."""
    repo = _copy_repo(root / "repo")
    listener = _Listener()
    out = root / "out"
    subs = _submissions(root / "subs", students, repo, {"out": str(out), "port": str(listener.port)})
    before = _digest(repo)
    config = GradingConfig(subs, out, repo / "chapters" / "exercises" / "solutions", repo=repo,
                           timeout=180, cell_timeout=CELL_TIMEOUT, sandbox=sandbox, file_mb=8,
                           processes=16, trusted=sandbox == "none")
    results, info = grade(config)
    write_report(results, out, info)
    report = (out / "grades.csv").read_text()
    time.sleep(1.5)  # the daemon would write now
    return {"results": results, "info": info, "config": config, "before": before,
            "after": _digest(repo), "report": report, "report_later": (out / "grades.csv").read_text(),
            "connections": listener.close()}


def _grade_both(tmp: Path) -> dict:
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(_grade_copy, tmp / "a", SANDBOXED, "auto"),
                pool.submit(_grade_copy, tmp / "b", UNSANDBOXED, "none")]
        sandboxed, unsandboxed = (job.result() for job in jobs)
    results = sandboxed["results"] + [r for r in unsandboxed["results"] if r.student not in SANDBOXED]
    out = tmp / "report"
    write_report(results, out, sandboxed["info"])
    return {**sandboxed, "results": results, "out": out, "unsandboxed": unsandboxed}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every prepared submission once, eve and the attackers twice; one report from both graders.

    Under pytest-xdist the workers share one grading run (the first to get the lock grades).
    Untrusted submissions are graded in the sandbox only: where bubblewrap does not work, every
    test of this fixture is skipped, and fails under CI (``make system-deps`` installs it; CI runs that first).
    """
    require_bubblewrap()  # the hostile submissions are graded in the sandbox only
    shared = tmp_path_factory.getbasetemp()
    shared = shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared
    with open(shared / "grading.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = shared / "grading.pickle"
        if not saved.exists():
            saved.write_bytes(pickle.dumps(_grade_both(tmp_path_factory.mktemp("grading"))))
        return pickle.loads(saved.read_bytes())


def _totals(results) -> dict[str, float]:
    totals: dict[str, float] = {}
    for r in results:
        totals[r.student] = totals.get(r.student, 0.0) + r.points
    return totals


def _row(results, student: str, key: str):
    return next(r for r in results if r.student == student and r.exercise.endswith("/" + key))


@pytest.mark.slow
def test_each_submission_scores_exactly_the_expected_points(graded):
    totals = {k: v for k, v in _totals(graded["results"]).items() if k not in (*ATTACKERS, ODD_NAME, "zz_honest")}
    assert totals == {**{k: float(v) for k, v in EXPECTED.items()},
                      "blank": 0.0, "mallory": 0.0, CHINESE_STUDENT: 2.0}, graded["results"]
    # The instructor's answers (in every submission but the broken exercises) pass the hidden checks.
    exercises = exercises_of(nbformat.read(solutions_dir() / NAME, as_version=4))
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
def test_a_chinese_students_feedback_is_chinese_and_the_report_stays_english(graded):
    """The language comes from the submission's metadata (course/student/messages.py), the
    feedback's markdown from chapters/zh/exercises/ (the student version the student worked in);
    grades.csv is the instructor's, in English."""
    rows = [r for r in graded["results"] if r.student == CHINESE_STUDENT]
    assert [r.message for r in rows[:3]] == [
        "check failed: AssertionError: column standard deviations (correction=0) should be 1",
        "passed", "not attempted (NotImplementedError)"], rows
    zh = nbformat.read(zh_dir() / "exercises" / NAME, as_version=4)
    feedback = nbformat.read(graded["config"].out / "feedback" / CHINESE_STUDENT / NAME, as_version=4)
    lines = [c.outputs[0].text for c in feedback.cells if c.cell_type == "code" and c.outputs]
    assert lines[:3] == ["ex1：0 / 1 分：检查未通过：AssertionError: 每一列的标准差（correction=0）应为 1\n",
                         "ex2：2 / 2 分：通过\n", "ex3：0 / 2 分：未作答（NotImplementedError）\n"], lines
    assert feedback.cells[0].source == zh.cells[0].source, "the markdown the student read"


@pytest.mark.slow
def test_code_outside_definitions_is_refused_and_nothing_changes(graded):
    for grader in (graded, graded["unsandboxed"]):
        assert grader["after"] == grader["before"], "the instructor's files must end up unchanged"
        eve = _row(grader["results"], "eve", "ex3")
        assert eve.points == 0 and "top level" in eve.message, eve.message
        assert _totals(grader["results"])["eve"] == EXPECTED["eve"]


@pytest.mark.slow
def test_report_csv_and_json_agree(graded):
    out = graded["out"]
    with open(out / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    report = json.loads((out / "grades.json").read_text())
    assert list(rows[0]) == ["student", "exercise", "points", "max_points", "message"]
    assert len(rows) == len(report["results"]) == len(graded["results"])
    assert report["totals"]["alice"]["points"] == EXPECTED["alice"]
    unread = {"mallory", "h5_symlink", "h6_hardlink", "h11_fifo"}
    for grader, students in ((graded, SANDBOXED), (graded["unsandboxed"], UNSANDBOXED)):
        feedback = grader["config"].out / "feedback"
        assert {p.parent.name for p in feedback.glob(f"*/{NAME}")} == set(students) - unread


@pytest.mark.slow
def test_feedback_shows_each_checks_name_points_and_message_not_the_hidden_checks(graded):
    source = nbformat.read(solutions_dir() / NAME, as_version=4)
    feedback = nbformat.read(graded["unsandboxed"]["config"].out / "feedback" / "dave" / NAME,
                             as_version=4)
    for exercise in exercises_of(source):
        cell = feedback.cells[exercise.tests_cell]
        hidden = source.cells[exercise.tests_cell].source.split("### BEGIN HIDDEN TESTS")[1]
        assert "BEGIN HIDDEN" not in cell.source and hidden.strip().splitlines()[0] not in cell.source
        assert cell.outputs[0]["text"].startswith(f"{exercise.key}: ")
    assert "0 / 2 points: timed out" in feedback.cells[exercises_of(source)[1].tests_cell].outputs[0]["text"]


@pytest.mark.slow
def test_attackers_gain_nothing_and_an_honest_student_after_them_gets_full_marks(graded):
    totals = _totals(graded["results"])
    assert {k: totals[k] for k in HOSTILE} == HOSTILE_POINTS, [r for r in graded["results"] if r.points]
    assert totals["h5_symlink"] == totals["h6_hardlink"] == 0
    assert totals["zz_honest"] == 10, [r for r in graded["results"] if r.student == "zz_honest"]
    assert graded["after"] == graded["before"], "the repository must end up unchanged"
    assert graded["report_later"] == graded["report"], "a daemon rewrote the report"
    assert "daemon" not in graded["report"]
    assert not [p for p in graded["info"]["integrity"] if p["student"] == "zz_honest"]


@pytest.mark.slow
def test_top_level_attacks_are_refused_before_they_run(graded):
    for key in ("ex1", "ex2", "ex3", "ex4", "ex5"):
        message = _row(graded["results"], "h1_top_level", key).message
        assert "answer cell: line" in message and "may only hold" in message, message
    assert "calls code" in _row(graded["results"], "h1_top_level", "ex5").message


@pytest.mark.slow
def test_attacks_from_inside_calls_are_caught(graded):
    results = graded["results"]
    assert "AttributeError" in _row(results, "h2_in_calls", "ex1").message, "there is no IPython"
    rebinder = _row(results, "h2_in_calls", "ex2")
    assert rebinder.points == 0 and "check failed" in rebinder.message, "the checker's torch is its own"
    assert any(p["student"] == "h2_in_calls" and p["kind"] == "rebound" and "torch.allclose" in p["details"]
               for p in graded["info"]["integrity"]), "what it rebound in its own process is recorded"
    assert "killed" in _row(results, "h2_in_calls", "ex4").message
    assert _row(results, "h2_in_calls", "ex5").points == 2, "a new judge grades the rest"
    assert "symbolic link" in _row(results, "h5_symlink", "ex1").message
    assert "hard link" in _row(results, "h6_hardlink", "ex1").message


@pytest.mark.slow
def test_forgeries_from_inside_calls_earn_nothing_and_the_hidden_checks_stay_out_of_reach(graded):
    """Each of these earned its points (5 of 10) while an answer shared its process with its checks."""
    results = graded["results"]
    assert [_row(results, "h7_forgers", k).points for k in ("ex1", "ex2", "ex3", "ex4", "ex5")] == [0] * 5
    assert "ChannelError" in _row(results, "h7_forgers", "ex1").message, "a forged report is noise"
    assert "the gradient is wrong" in _row(results, "h7_forgers", "ex2").message, \
        "the checker's torch.allclose is its own"
    hidden = _row(results, "h7_forgers", "ex3").message
    assert "hidden checks: not found" in hidden and "hidden layers" not in hidden, hidden
    assert "expected accuracy 0.0833, got 0.5000" in _row(results, "h7_forgers", "ex5").message, \
        "the check's own variables are out of the answer's reach"


@pytest.mark.slow
def test_objects_that_answer_torch_and_numpy_protocols_earn_nothing_and_crash_nothing(graded):
    """Data only crosses to the checker: a handle forwarded ``__torch_function__``, ``__array_interface__``..."""
    rows = [_row(graded["results"], "h9_data_only", k) for k in ("ex1", "ex2", "ex3", "ex4", "ex5")]
    assert [r.points for r in rows] == [0, 0, 0, 0, 2], rows
    for row in rows[:4]:
        assert "check failed" in row.message and "killed" not in row.message, row.message
    assert "must be Tensor, not Remote" in rows[0].message, "torch.allclose is not the answer's"
    assert "the gradient is wrong" in rows[1].message, "a tensor subclass arrives as its data"
    assert "losses differ from a correct loop" in rows[3].message and "1048576" not in rows[3].message, \
        "NumPy reads the 20 losses returned (and compares them), not 2**20 of memory"


@pytest.mark.slow
def test_a_submission_cannot_take_the_grader_or_the_report_down(graded):
    """A 100,000-deep cell, an oversized cell, escapes and surrogates, a FIFO,
    a folder name that is not UTF-8. Each costs its own exercise at most; the report stays whole."""
    results = graded["results"]
    rows = [_row(results, "h10_take_down", k) for k in ("ex1", "ex2", "ex3", "ex4", "ex5")]
    assert [r.points for r in rows] == [0, 0, 0, 3, 2], rows
    assert "SyntaxError" in rows[0].message and "cannot be parsed" in rows[0].message, rows[0].message
    assert "more than the 100,000 allowed" in rows[2].message, rows[2].message
    assert "not a regular file" in _row(results, "h11_fifo", "ex1").message
    assert _totals(results)[ODD_NAME] == 10, [r for r in results if r.student == ODD_NAME]
    out = graded["out"]
    text = (out / "grades.csv").read_text(encoding="utf-8")
    assert not [c for c in text if not c.isprintable() and c not in "\n\r"], "a control character in grades.csv"
    for escaped in ("\\x1b[2J", "\\ud800", "h12_caf\\udce9"):
        assert escaped in text, (escaped, [line for line in text.splitlines() if "h10" in line][:3])
    report = json.loads((out / "grades.json").read_text(encoding="utf-8"))
    message = next(r["message"] for r in report["results"]
                   if r["student"] == "h10_take_down" and r["exercise"].endswith("/ex2"))
    assert "\\x1b[2J" in message and "\\ud800" in message and message.isprintable(), message
    assert report["totals"]["h12_caf\\udce9"]["points"] == 10
    with open(out / "grades.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == len(report["results"]) == len(graded["results"])
    feedback = nbformat.read(graded["config"].out / "feedback" / "h10_take_down" / NAME, as_version=4)
    shown = [o["text"] for c in feedback.cells for o in c.get("outputs", []) if "text" in o]
    assert any("\\x1b[2J" in text for text in shown) and not any("\x1b" in text for text in shown), shown


@pytest.mark.slow
def test_resource_limits_say_which_limit_was_hit(graded):
    results = graded["results"]
    assert "memory limit" in _row(results, "h3_resources", "ex1").message
    output = _row(results, "h3_resources", "ex4").message  # 300 MB printed: one file, and all its files
    assert "size limit" in output or "disk limit of 8 MiB for the exercise" in output, output
    assert _row(results, "h3_resources", "ex2").points == 0


@pytest.mark.slow
def test_the_sandbox_hides_the_sources_and_the_network_and_bounds_processes(graded):
    results = graded["results"]
    assert _row(results, "h2_in_calls", "ex3").points == 0, "solutions were readable in the sandbox"
    assert graded["connections"] == [], "a socket reached the host's 127.0.0.1"
    assert "ConnectionRefusedError" in _row(results, "h3_resources", "ex3").message
    assert "process limit" in _row(results, "h3_resources", "ex2").message
    assert _row(results, "h4_files", "ex5").points == 0
    assert all(p["kind"] in ("checker", "rebound") for p in graded["info"]["integrity"]), "no file changed"


@pytest.mark.slow
def test_without_sandbox_changes_are_detected_and_undone(graded):
    unsandboxed = graded["unsandboxed"]
    results, info = unsandboxed["results"], unsandboxed["info"]
    assert info["sandbox"] == "none" and "UNSAFE" in info["sandbox_note"] and info["trusted"] is True
    files = _row(results, "h4_files", "ex5")
    assert files.points == 0 and "sitecustomize.py" in files.message and "created" in files.message
    assert any(p["student"] == "h4_files" and p["kind"] == "files" for p in info["integrity"])
    assert unsandboxed["after"] == unsandboxed["before"]


def test_links_are_refused_not_followed(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "real.ipynb").write_text("{}")
    (tmp_path / "s" / NAME).symlink_to(tmp_path / "real.ipynb")
    with pytest.raises(ValueError, match="symbolic link"):
        read_submission(tmp_path / "s" / NAME, tmp_path / "s")


def test_only_answer_cells_come_from_the_submission():
    source = nbformat.read(solutions_dir() / NAME, as_version=4)
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


def _empty_submissions(tmp_path: Path) -> Path:
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    return tmp_path / "subs"


def test_grading_without_the_sandbox_needs_the_trusted_flag(tmp_path, capsys):
    subs = _empty_submissions(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--submissions", str(subs), "--out", str(tmp_path / "out"), "--sandbox", "none"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: --sandbox: none runs student code without a sandbox: add --trusted" in error, error
    with pytest.raises(SandboxRequired, match="--trusted"):
        grade(GradingConfig(subs, tmp_path / "out", repo=REPO, sandbox="none"))
    assert not (tmp_path / "out").exists(), "nothing was graded"


def test_trusted_grading_without_the_sandbox_says_so(tmp_path, capsys):
    subs = _empty_submissions(tmp_path)
    assert main(["--submissions", str(subs), "--out", str(tmp_path / "out"), "--sandbox", "none",
                 "--trusted"]) == 0
    out = capsys.readouterr().out
    assert "WITHOUT the sandbox" in out and "--trusted" in out, out
    report = json.loads((tmp_path / "out" / "grades.json").read_text())
    assert report["sandbox"] == "none" and report["trusted"] is True and "UNSAFE" in report["sandbox_note"]


def test_what_an_answer_rebound_in_its_own_process_is_recorded_not_scored():
    """An honest answer whose libraries rebind names as they load (``torch._dynamo`` wraps
    ``torch.manual_seed``) keeps its points: the record protects nothing, so it costs nothing."""
    exercise = exercises_of(nbformat.read(solutions_dir() / NAME, as_version=4))[0]
    reply = {"op": "result", "key": exercise.key, "answer_error": None, "check_error": None,
             "tampered": [], "rebound": ["torch.manual_seed"]}
    assert score(exercise, Run(replies={exercise.key: reply}), {}, set()) == (exercise.points, "passed")
    shadowing = {**reply, "tampered": ["checks"], "rebound": []}
    points, message = score(exercise, Run(replies={exercise.key: shadowing}), {}, set())
    assert points == 0 and "checks" in message
