"""Shared fixtures; turns any blocked network attempt into a failed run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.synthetic import SyntheticConfig, ensure_data

#: Small enough to generate in well under a second, big enough for every class.
TINY = SyntheticConfig(seed=7, num_train=24, num_val=12, min_size=40, max_size=64)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A tiny synthetic dataset shared by the tests of one session (do not modify it)."""
    return ensure_data(tmp_path_factory.mktemp("data") / "shapes", TINY, verbose=False)


@pytest.fixture(scope="session")
def shapes_data():
    """The full synthetic dataset in data/shapes (as the notebooks use it)."""
    return ensure_data(verbose=False)


def pytest_sessionfinish(session, exitstatus):
    log = os.environ.get("COMPANION_NETGUARD_LOG")
    if log and Path(log).is_file() and Path(log).read_text().strip():
        print(f"\nNetwork access was attempted (see {log}):\n{Path(log).read_text()}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(session, config, items):
    """Longest files first (tests/durations.py), so that two workers finish together."""
    from tests.durations import load, order

    items[:] = [items[i] for i in order([item.nodeid for item in items], load())]


def pytest_configure(config):
    """``make durations``: the controller (which sees every worker's reports) records them."""
    from tests.durations import RECORD_ENV, CpuMeter, Recorder

    path = os.environ.get(RECORD_ENV)
    if path:
        config.pluginmanager.register(CpuMeter(), "companion-cpu")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Recorder(Path(path)), "companion-durations")
