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


@pytest.hookimpl(trylast=True)  # after nbval's own configure, whose collector it swaps
def pytest_configure(config):
    """``make durations``: the controller (which sees every worker's reports) records them."""
    _collect_notebooks_with_test_parameters(config)
    from tests.durations import RECORD_ENV, CpuMeter, Recorder

    path = os.environ.get(RECORD_ENV)
    if path:
        config.pluginmanager.register(CpuMeter(), "companion-cpu")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Recorder(Path(path)), "companion-durations")


def _collect_notebooks_with_test_parameters(config) -> None:
    """nbval runs each notebook with its parameters cell rewritten (tests/notebook_parameters.py).

    nbval's own collector is swapped for a subclass whose only change is that rewrite; every other
    cell runs exactly as committed."""
    nbval = config.pluginmanager.get_plugin("nbval")
    if nbval is None or config.pluginmanager.get_plugin("companion-notebook-parameters"):
        return
    from tests.notebook_parameters import apply_parameters

    class ParametrizedNotebook(nbval.IPyNbFile):
        def collect(self):
            cells = list(super().collect())  # reads self.nb; each item holds its cell node
            apply_parameters(self.nb, self.path)  # rewrites the parameters cell's node in place
            return cells

    class Collector:
        @staticmethod
        def pytest_collect_file(file_path, parent):
            option = parent.config.option
            if (option.nbval or option.nbval_lax) and file_path.suffix == ".ipynb":
                return ParametrizedNotebook.from_parent(parent, path=file_path)
            return None

    config.pluginmanager.unregister(nbval)
    config.pluginmanager.register(Collector(), "companion-notebook-parameters")
