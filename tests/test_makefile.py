"""The Makefile: `help` is the default goal and lists every target with a description."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_target_is_documented_in_help():
    makefile = (REPO / "Makefile").read_text()
    targets = re.findall(r"^([a-z][a-z_-]*):", makefile, re.M)
    undocumented = [t for t in targets if not re.search(rf"^{t}:.*## ", makefile, re.M)]
    assert not undocumented, f"targets without a '## description': {undocumented}"
    shown = subprocess.run(["make", "-s", "-C", str(REPO)], capture_output=True, text=True,
                           check=True).stdout
    for target in ("lab", "test", "install", "data", "lint", "format", "clean"):
        assert re.search(rf"make {target}\s", shown), f"`make` (help) does not list {target}"


def test_ci_runs_the_readme_command():
    ci = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    assert "make test" in ci and "make test" in readme and "make lab" in readme
