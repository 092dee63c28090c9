"""Tests for common/paths.py: the repository and data folders, from any working directory — the tests that start processes (the rest: tests/unit/test_paths.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO, installed_copy


def test_an_installed_copy_uses_the_user_cache_and_tools_say_what_to_do(tmp_path):
    env = installed_copy(tmp_path)
    probe = ("import common, common.paths as p; print(common.__file__); "
             "print(p.default_data_root()); print(p.find_repo_root())")
    lines = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                           cwd=tmp_path, check=True, timeout=60).stdout.splitlines()
    assert lines[0].startswith(str(tmp_path / "site"))
    assert lines[1] == str(tmp_path / "home" / ".cache" / "torch-pipelines-companion")
    assert lines[2] == "None"
    done = subprocess.run([sys.executable, "-m", "course.assignments", "list"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode != 0 and "COMPANION_REPO" in done.stderr
    pointed = subprocess.run([sys.executable, "-m", "course.assignments", "list"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=60,
                             env={**env, "COMPANION_REPO": str(REPO)}, check=False)
    assert pointed.returncode == 0 and "ex01_pytorch_basics.ipynb" in pointed.stdout
