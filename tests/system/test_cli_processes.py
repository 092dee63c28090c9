"""Tests for common/cli.py, and `--help` of every entry point the code defines — the tests that start
processes (the rest: tests/unit/test_cli.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.test_cli import REPO


def test_an_entry_point_helps_as_a_real_command_without_warnings():
    done = subprocess.run([sys.executable, "-m", "common.ddp.train", "--help"], capture_output=True,
                          text=True, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:") and "--data-pipeline" in done.stdout
    assert "Warning" not in done.stderr
