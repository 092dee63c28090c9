"""LICENSE, CITATION.cff, CONTRIBUTING.md, the CI workflow and the pre-commit configuration — the tests that start processes (the rest: tests/unit/test_project_files.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.system_parts import require
from tests.unit.test_project_files import REPO


@pytest.mark.slow
def test_pre_commit_run_all_files_passes_offline(tmp_path):
    venv_bin = Path(sys.executable).parent
    require("pre-commit", None if (venv_bin / "pre-commit").exists() or shutil.which("pre-commit") else
            "pre-commit is not installed (pip install -e .[dev]; make install installs it)")
    require("git", None if shutil.which("git") else "git not found on PATH (apt-get install git)")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, text=True,
                           capture_output=True, check=True).stdout.split()
    copy = tmp_path / "repo"
    for name in files:
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
           "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PYTHONPATH": str(copy)}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=copy, check=True)
    subprocess.run([*git, "add", "-A"], cwd=copy, check=True)
    result = subprocess.run([str(venv_bin / "python"), "-m", "pre_commit", "run", "--all-files"],
                            cwd=copy, env=env, text=True, capture_output=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert result.stdout.count("Passed") >= 4
