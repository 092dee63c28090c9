"""The per-file durations of the last full run, so the pytest workers stay balanced.

``--dist loadfile`` hands each worker whole files in collection order. With files of 1 s and of
100 s, the order decides the wall time: a long file started last keeps one worker busy while the
other idles. ``order`` sorts the files longest first (the classic longest-processing-time rule),
from the seconds that ``make durations`` recorded in ``tests/durations.json``; a file it does not
know counts as ``UNKNOWN`` seconds. Tests inside a file keep their order.

Beside the wall seconds, ``make durations`` writes the CPU seconds each test cost (its own
process and every child process it waited for, torchrun's ranks and notebook kernels included)
to ``build/cpu.json``: unlike wall seconds they do not grow when the machine is loaded, so they
show where `make test`'s time goes even on a busy machine. Where the cgroup v1 ``cpuacct``
controller is writable (as root on this machine) each worker counts in a cgroup of its own, which
sees every descendant, sandboxed judges and killed ranks too; elsewhere ``getrusage`` counts only
the children that were waited for.
"""

from __future__ import annotations

import json
import os
import resource
from collections import defaultdict
from pathlib import Path

import pytest

#: The record, committed: ``make durations`` rewrites it after a full run.
RECORD = Path(__file__).with_name("durations.json")
#: Seconds assumed for a file the record does not list (a new test file).
UNKNOWN = 5.0
#: Set to a path by ``make durations``: the run writes its per-file seconds there.
RECORD_ENV = "COMPANION_RECORD_DURATIONS"
#: Where ``make durations`` writes the CPU seconds per file and of the costliest tests.
CPU_RECORD = Path(__file__).parents[1] / "build" / "cpu.json"


#: Where each worker's cpuacct cgroup goes, when it can have one.
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def rusage_seconds() -> float:
    """CPU seconds of this process and of every child it (or they, recursively) waited for."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def cgroup_clock(root: Path = CPUACCT):
    """A function giving the CPU seconds of this process's own new cpuacct cgroup (and all it
    starts from now on), or None where no such cgroup can be made."""
    group = root / "companion-tests" / str(os.getpid())
    try:
        group.mkdir(parents=True, exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
        usage = group / "cpuacct.usage"
        usage.read_text()
    except OSError:
        return None
    return lambda: int(usage.read_text()) / 1e9


def leave_cgroup(root: Path = CPUACCT) -> None:
    """Move this process back to the cpuacct root and remove its cgroup (and the emptied ones of
    earlier runs); a cgroup that still holds a process is left."""
    try:
        (root / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return
    for group in (root / "companion-tests").glob("*"):
        try:
            group.rmdir()
        except OSError:
            pass


class CpuMeter:
    """A pytest plugin for each worker: the CPU seconds of each test phase, in its report."""

    def __init__(self) -> None:
        self.clock = cgroup_clock() or rusage_seconds
        self.last = self.clock()

    def pytest_runtest_logstart(self) -> None:
        self.last = self.clock()

    def pytest_sessionfinish(self) -> None:
        if self.clock is not rusage_seconds:
            leave_cgroup()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = (yield).get_result()
        now = self.clock()
        report.user_properties = [*report.user_properties, ("cpu", now - self.last)]
        self.last = now


def file_of(nodeid: str) -> str:
    """``tests/unit/test_x.py::test_y[1]`` -> ``tests/unit/test_x.py``."""
    return nodeid.split("::", 1)[0]


def load(path: Path = RECORD) -> dict[str, float]:
    """The recorded seconds per file ({} when there is no record yet)."""
    return json.loads(path.read_text()) if path.is_file() else {}


def order(nodeids: list[str], seconds: dict[str, float]) -> list[int]:
    """Indices of ``nodeids``, longest file first; stable within a file and among equals."""
    first_seen = {}
    for i, nodeid in enumerate(nodeids):
        first_seen.setdefault(file_of(nodeid), i)

    def key(i: int) -> tuple[float, int, int]:
        name = file_of(nodeids[i])
        return (-seconds.get(name, UNKNOWN), first_seen[name], i)

    return sorted(range(len(nodeids)), key=key)


class Recorder:
    """A pytest plugin: sums setup + call + teardown seconds per file, writes them at the end."""

    def __init__(self, path: Path, cpu_path: Path = CPU_RECORD) -> None:
        self.path, self.cpu_path = path, cpu_path
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.cpu_of_test: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration
        cpu = sum(value for key, value in report.user_properties if key == "cpu")
        self.cpu[file_of(report.nodeid)] += cpu
        self.cpu_of_test[report.nodeid] += cpu

    def pytest_sessionfinish(self) -> None:
        ranked = dict(sorted(((k, round(v, 1)) for k, v in self.seconds.items()),
                             key=lambda kv: -kv[1]))
        self.path.write_text(json.dumps(ranked, indent=1) + "\n")
        files = dict(sorted(((k, round(v, 1)) for k, v in self.cpu.items()), key=lambda kv: -kv[1]))
        tests = sorted(self.cpu_of_test.items(), key=lambda kv: -kv[1])[:200]
        self.cpu_path.parent.mkdir(parents=True, exist_ok=True)
        self.cpu_path.write_text(json.dumps({"total": round(sum(files.values()), 1), "files": files,
                                             "tests": {k: round(v, 1) for k, v in tests}},
                                            indent=1) + "\n")
