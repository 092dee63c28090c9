"""Tests for common/tools/doctor.py: each faked condition is flagged, with its fix — the tests that start processes (the rest: tests/unit/test_doctor.py)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from common.synthetic import verify
from common.tools.doctor import (
    check_data,
    diagnose,
    report,
)
from tests.unit.test_doctor import REPO, config_of, healthy


def test_missing_data_is_flagged_with_make_data(tiny_data, tmp_path):
    root = tmp_path / "nowhere" / "shapes"
    facts = dataclasses.replace(healthy(tiny_data, config_of(tiny_data)), data_root=root,
                                data_problems=verify(root, config_of(tiny_data)))
    check = check_data(facts)
    assert check.status == "problem" and str(root) in check.detail
    assert "make data" in check.fix
    text = report(diagnose(facts))
    assert "fix: run `make data`" in text
    assert text.splitlines()[-1].startswith("VERDICT: NOT READY") and "data" in text.splitlines()[-1]


def test_command_prints_a_verdict_and_matching_exit_status():
    result = subprocess.run([sys.executable, "-m", "common.tools.doctor"], capture_output=True,
                            text=True, timeout=120, cwd=REPO)
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("VERDICT:"), result.stdout + result.stderr
    failed = any(line.startswith("[FAIL]") for line in lines)
    assert result.returncode == (1 if failed else 0)
    assert any(line.startswith("[ ok ] packages: torch ") for line in lines) or failed
