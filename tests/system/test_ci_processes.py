""".ci/run as a process: a failed `make system-deps` fails CI before any test runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _ci_run_with_make(tmp_path: Path, system_deps_status: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run a copy of .ci/run with a stand-in `make` on PATH that logs its targets."""
    (tmp_path / ".ci").mkdir()
    shutil.copy2(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "make.log"
    (bin_dir / "make").write_text(f'#!/bin/sh\necho "$* CONSTRAINTS=$CONSTRAINTS" >> {log}\n'
                                  f'[ "$1" = system-deps ] && exit {system_deps_status}\nexit 0\n')
    (bin_dir / "make").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CI": "true"}
    env.pop("CONSTRAINTS", None)
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env=env, capture_output=True, text=True,
                          timeout=60, check=False, stdin=subprocess.DEVNULL)
    return done, log.read_text().splitlines() if log.exists() else []


def test_a_failed_make_system_deps_fails_ci_and_runs_no_test(tmp_path):
    done, calls = _ci_run_with_make(tmp_path, 100)
    assert done.returncode == 1, done.stderr
    assert calls == ["system-deps CONSTRAINTS=constraints.txt"], "make test never ran"
    assert "make system-deps failed" in done.stderr


def test_with_its_system_parts_ci_runs_make_test_on_the_pinned_versions(tmp_path):
    done, calls = _ci_run_with_make(tmp_path, 0)
    assert done.returncode == 0, done.stderr
    assert calls == ["system-deps CONSTRAINTS=constraints.txt", "test CONSTRAINTS=constraints.txt"]
