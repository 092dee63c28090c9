"""The Makefile: `help` is the default goal and lists every target with a description."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_command():
    ci = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    assert "make test" in ci and "make test" in readme and "make lab" in readme
