"""course/grading/report.py: the totals the grader prints are the ones grades.json holds, computed once."""

from __future__ import annotations

import json

from course.grading.config import Result
from course.grading.report import write_report


def test_the_report_returns_the_totals_it_wrote(tmp_path):
    results = [Result("alice", "ex01/ex1", 1.0, 1.0, "ok"), Result("alice", "ex01/ex2", 0.0, 2.0, "failed"),
               Result("bob\x1b[31m", "ex01/ex1", 0.5, 1.0, "half")]
    totals = write_report(results, tmp_path, {"sandbox": "bwrap"})
    assert totals == {"alice": {"points": 1.0, "max_points": 3.0}, "bob\\x1b[31m": {"points": 0.5, "max_points": 1.0}}
    assert json.loads((tmp_path / "grades.json").read_text(encoding="utf-8"))["totals"] == totals
    assert (tmp_path / "grades.csv").read_text(encoding="utf-8").count("\n") == 4
