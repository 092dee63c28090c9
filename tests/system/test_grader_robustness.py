"""A submission cannot take the grader down: fast checks of each defence.

The same attacks graded end to end are ``h10_take_down``, ``h11_fifo`` and the non-UTF-8
folder name in tests/test_grading.py.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import threading
from pathlib import Path

import pytest

from course.grading.config import Result
from course.grading.inside.answer_rules import MAX_ANSWER_CHARS, answer_problems, defined_names
from course.grading.report import write_report
from course.grading.submission import read_submission
from course.grading.text import clean, shown


@pytest.mark.parametrize("cell", ["x = " + "-" * 90_000 + "1", "x = " + "+".join(["1"] * 45_000),
                                  "x = " + "(" * 45_000 + ")" * 45_000, "x = 1\0"])
def test_a_cell_nested_too_deeply_is_a_syntax_error_of_its_own_exercise(cell):
    why = answer_problems(cell)
    assert why is not None and why.startswith("SyntaxError"), why
    assert defined_names(cell) == []


def test_an_oversized_cell_is_refused_before_it_is_parsed():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    why = answer_problems("x = [" + "[" * 50 + "1," * (2 * MAX_ANSWER_CHARS) + "]" * 51)
    assert why is not None and "more than the 100,000 allowed" in why, why
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000, "parsed anyway (KiB)"
    assert answer_problems("def f():\n    return 1\n" + "# padding\n" * 1000) is None


def test_only_regular_files_are_read_and_a_fifo_does_not_block(tmp_path):
    folder = tmp_path / "student"
    folder.mkdir()
    os.mkfifo(folder / "ex01.ipynb")
    outcome = []

    def read():
        try:
            read_submission(folder / "ex01.ipynb", folder)
        except ValueError as error:
            outcome.append(str(error))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # unblock the reader, then fail
        os.close(os.open(folder / "ex01.ipynb", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO blocked")
    assert outcome and "not a regular file" in outcome[0], outcome


def test_text_from_a_submission_is_written_and_shown_safely():
    assert clean("a\ud800b") == "a\\ud800b" and clean("ok é 中") == "ok é 中"
    assert shown("\x1b[2J\rtotal\n\u202e") == "\\x1b[2J\\rtotal\\n\\u202e"
    assert shown("h12_caf\udce9") == "h12_caf\\udce9"


def _rows(student: str, message: str) -> list[Result]:
    return [Result(student, "ex01/ex1", 1.0, 1.0, message), Result(student, "ex01/ex2", 0.0, 2.0, "x")]


def test_the_report_survives_surrogates_escapes_and_non_utf8_names(tmp_path):
    info = {"sandbox": "bwrap", "integrity": [{"student": "caf\udce9", "exercise": "ex01/ex1",
                                               "kind": "rebound", "details": ["torch.\ud800", "\x1b[31m"]}]}
    write_report(_rows("caf\udce9", "check failed: \x1b[2J\ud800"), tmp_path, info)
    report = json.loads((tmp_path / "grades.json").read_text(encoding="utf-8"))
    assert report["results"][0]["message"] == "check failed: \\x1b[2J\\ud800"
    assert report["integrity"][0]["details"] == ["torch.\\ud800", "\\x1b[31m"]
    assert report["totals"] == {"caf\\udce9": {"points": 1.0, "max_points": 3.0}}
    text = (tmp_path / "grades.csv").read_text(encoding="utf-8")
    assert "\x1b" not in text
    with open(tmp_path / "grades.csv", newline="", encoding="utf-8") as handle:
        assert [r["student"] for r in csv.DictReader(handle)] == ["caf\\udce9"] * 2


def test_a_failed_report_leaves_the_previous_one_whole(tmp_path):
    write_report(_rows("alice", "passed"), tmp_path, {"sandbox": "bwrap"})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(TypeError):  # something in the report that JSON cannot write
        write_report(_rows("bob", "passed"), tmp_path, {"sandbox": object()})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, "no file cut short, none left over"
    assert all(len(data) > 50 for data in before.values())


def test_report_files_are_replaced_not_rewritten_in_place(tmp_path):
    write_report(_rows("alice", "passed"), tmp_path, {})
    inode = (tmp_path / "grades.json").stat().st_ino
    link = Path(tmp_path / "reader.json")
    os.link(tmp_path / "grades.json", link)  # a reader that holds the old report keeps it whole
    write_report(_rows("bob", "passed"), tmp_path, {})
    assert (tmp_path / "grades.json").stat().st_ino != inode and "alice" in link.read_text()
