"""The issue's check, as a run of pytest: with bubblewrap hidden, the sandbox's tests skip (reason listed)
outside CI and fail under CI=true naming the missing part (tests/unit/test_system_parts.py: in-process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Two sandbox tests: a plain one (a skip mark before) and one of a module-wide fixture.
TESTS = ["tests/system/test_sandbox.py::test_bwrap_shows_only_the_allow_list_read_only",
         "tests/system/test_sandbox.py::test_the_sandboxs_dev_shm_is_bounded"]


def _pytest_without_bwrap(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "CI" and not key.startswith("PYTEST_XDIST")}
    env["PATH"] = str(tmp_path)  # empty: no bwrap (the tests stop before anything else is needed)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", *TESTS, "-q", "-rs", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "--timeout=120"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_without_bubblewrap_the_sandbox_tests_skip_with_the_reason_listed(tmp_path):
    done = _pytest_without_bwrap(tmp_path, None)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 skipped" in done.stdout, done.stdout[-3000:]
    listed = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED [1] ")]
    assert len(listed) == 2, "listed with -rs, each test by its own line: " + done.stdout[-3000:]
    assert all(line.startswith("SKIPPED [1] tests/system/test_sandbox.py:") for line in listed), listed
    assert all("bubblewrap missing: bwrap not found" in line for line in listed), listed


@pytest.mark.slow
def test_under_ci_without_bubblewrap_the_sandbox_tests_fail_naming_it(tmp_path):
    done = _pytest_without_bwrap(tmp_path, "true")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 failed" in done.stdout, done.stdout[-3000:]
    assert done.stdout.count("CI needs bubblewrap, and it is missing: bwrap not found") >= 2, done.stdout[-3000:]
