"""The Makefile: `help` is the default goal and lists every target with a description — the tests that start processes (the rest: tests/unit/test_makefile.py)."""

from __future__ import annotations

import re
import subprocess

from tests.unit.test_makefile import REPO


def test_every_target_is_documented_in_help():
    makefile = (REPO / "Makefile").read_text()
    targets = re.findall(r"^([a-z][a-z_-]*):", makefile, re.M)
    undocumented = [t for t in targets if not re.search(rf"^{t}:.*## ", makefile, re.M)]
    assert not undocumented, f"targets without a '## description': {undocumented}"
    shown = subprocess.run(["make", "-s", "-C", str(REPO)], capture_output=True, text=True,
                           check=True).stdout
    for target in ("lab", "test", "install", "data", "lint", "format", "clean"):
        assert re.search(rf"make {target}\s", shown), f"`make` (help) does not list {target}"
