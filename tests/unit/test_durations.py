"""tests/durations.py: the longest files go first, a file's tests stay together and in order."""

from __future__ import annotations

import json

from tests.durations import UNKNOWN, Recorder, file_of, load, order


def test_longest_file_first_tests_of_a_file_together_and_in_order():
    ids = ["tests/a.py::t1", "tests/b.py::t1", "tests/a.py::t2", "ch/x.ipynb::Cell 0",
           "ch/x.ipynb::Cell 1", "tests/new.py::t"]
    seconds = {"tests/a.py": 2.0, "tests/b.py": 1.0, "ch/x.ipynb": 50.0}
    ranked = [ids[i] for i in order(ids, seconds)]
    assert ranked == ["ch/x.ipynb::Cell 0", "ch/x.ipynb::Cell 1", "tests/new.py::t",
                      "tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t1"]
    assert UNKNOWN > 2.0, "a new file is assumed long enough to start early"


def test_without_a_record_the_collection_order_is_kept():
    ids = ["tests/b.py::t", "tests/a.py::t", "tests/b.py::u"]
    assert [ids[i] for i in order(ids, {})] == ["tests/b.py::t", "tests/b.py::u", "tests/a.py::t"]


def test_the_recorder_sums_each_files_phases_and_writes_longest_first(tmp_path):
    class Report:
        def __init__(self, nodeid, duration):
            self.nodeid, self.duration = nodeid, duration

    recorder = Recorder(tmp_path / "d.json")
    for nodeid, duration in (("t/a.py::x", 0.5), ("t/b.py::y", 3.0), ("t/a.py::x", 0.25)):
        recorder.pytest_runtest_logreport(Report(nodeid, duration))
    recorder.pytest_sessionfinish()
    assert list(json.loads((tmp_path / "d.json").read_text()).items()) == [("t/b.py", 3.0),
                                                                          ("t/a.py", 0.8)]
    assert load(tmp_path / "d.json")["t/a.py"] == 0.8 and load(tmp_path / "none.json") == {}
    assert file_of("t/a.py::x[1]") == "t/a.py"
