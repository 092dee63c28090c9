"""tests/durations.py: the longest files go first, a file's tests stay together and in order."""

from __future__ import annotations

import json
import os

from tests.durations import (
    UNKNOWN,
    CpuMeter,
    Recorder,
    cgroup_clock,
    file_of,
    leave_cgroup,
    load,
    order,
)


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
        def __init__(self, nodeid, duration, cpu):
            self.nodeid, self.duration, self.user_properties = nodeid, duration, [("cpu", cpu)]

    recorder = Recorder(tmp_path / "d.json", tmp_path / "cpu.json")
    for nodeid, duration, cpu in (("t/a.py::x", 0.5, 2.0), ("t/b.py::y", 3.0, 0.5),
                                  ("t/a.py::x", 0.25, 1.0)):
        recorder.pytest_runtest_logreport(Report(nodeid, duration, cpu))
    recorder.pytest_sessionfinish()
    assert list(json.loads((tmp_path / "d.json").read_text()).items()) == [("t/b.py", 3.0),
                                                                          ("t/a.py", 0.8)]
    cpu = json.loads((tmp_path / "cpu.json").read_text())
    assert cpu == {"total": 3.5, "files": {"t/a.py": 3.0, "t/b.py": 0.5},
                   "tests": {"t/a.py::x": 3.0, "t/b.py::y": 0.5}}
    assert load(tmp_path / "d.json")["t/a.py"] == 0.8 and load(tmp_path / "none.json") == {}
    assert file_of("t/a.py::x[1]") == "t/a.py"


def test_the_cpu_meter_puts_each_phases_seconds_in_its_report(tmp_path):
    """The clock is the cgroup's where one can be made (here: a stand-in folder), else rusage."""
    assert cgroup_clock(tmp_path) is None, "a plain folder has no cpuacct.usage"
    group = tmp_path / "fake" / "companion-tests" / str(os.getpid())
    group.mkdir(parents=True)
    (group / "cpuacct.usage").write_text("2500000000\n")
    assert cgroup_clock(tmp_path / "fake")() == 2.5
    assert (group / "cgroup.procs").read_text() == str(os.getpid())
    (group / "cgroup.procs").unlink()
    (group / "cpuacct.usage").unlink()
    leave_cgroup(tmp_path / "fake")
    assert (tmp_path / "fake" / "cgroup.procs").read_text() == str(os.getpid())
    assert not group.exists(), "the emptied cgroup is removed"
    meter = CpuMeter()
    meter.clock = iter([10.0, 12.5, 13.0]).__next__
    meter.pytest_runtest_logstart()

    class Outcome:
        def __init__(self, report):
            self.report = report

        def get_result(self):
            return self.report

    class Report:
        user_properties = [("other", 1)]

    report = Report()
    for expected in (2.5, 0.5):
        wrapper = meter.pytest_runtest_makereport(None, None)
        next(wrapper)
        try:
            wrapper.send(Outcome(report))
        except StopIteration:
            pass
        assert report.user_properties[-1] == ("cpu", expected)
    assert Report.user_properties == [("other", 1)], "the item's own list is not changed"
