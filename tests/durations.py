"""The per-file durations of the last full run, so the two pytest workers stay balanced.

``--dist loadfile`` hands each worker whole files in collection order. With files of 1 s and of
100 s, the order decides the wall time: a long file started last keeps one worker busy while the
other idles. ``order`` sorts the files longest first (the classic longest-processing-time rule),
from the seconds that ``make durations`` recorded in ``tests/durations.json``; a file it does not
know counts as ``UNKNOWN`` seconds. Tests inside a file keep their order.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

#: The record, committed: ``make durations`` rewrites it after a full run.
RECORD = Path(__file__).with_name("durations.json")
#: Seconds assumed for a file the record does not list (a new test file).
UNKNOWN = 5.0
#: Set to a path by ``make durations``: the run writes its per-file seconds there.
RECORD_ENV = "COMPANION_RECORD_DURATIONS"


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

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        ranked = dict(sorted(((k, round(v, 1)) for k, v in self.seconds.items()),
                             key=lambda kv: -kv[1]))
        self.path.write_text(json.dumps(ranked, indent=1) + "\n")
