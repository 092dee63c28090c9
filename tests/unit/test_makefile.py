"""The Makefile: `help` is the default goal and lists every target with a description; what each target runs."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_command():
    ci = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    assert "make test" in ci and "make test" in readme and "make lab" in readme


def _make_list(name: str) -> list[str]:
    """The words of a ``NAME := ...`` or ``NAME = ...`` of the Makefile (continuation lines joined)."""
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith((f"{name} :=", f"{name} ="))]
    return line.split("=", 1)[1].split()


def test_make_test_runs_every_notebook_once_by_its_strongest_check():
    """Chapters out of nbval run from the wheel; exercises are graded, not run under nbval."""
    installed = ast.parse((REPO / "tests" / "system" / "test_installed.py").read_text())
    (chapters,) = [ast.literal_eval(node.value) for node in installed.body
                   if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CHAPTERS"]
    wheel = _make_list("WHEEL_CHAPTERS")
    assert wheel == [f"chapters/{stem}.ipynb" for stem in chapters]
    assert all((REPO / path).is_file() for path in wheel), wheel
    recipe = (REPO / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "$(TEST_RUN)" in recipe
    run = " ".join(_make_list("TEST_RUN"))
    assert "$(NBVAL_NOTEBOOKS)" in run and "$(NOTEBOOKS)" not in run
    assert "COMPANION_QUICK" not in run, "no switch: tests/conftest.py rewrites each notebook's parameters cell"
    nbval = " ".join(_make_list("NBVAL_NOTEBOOKS"))
    assert "exercises" not in nbval and "$(WHEEL_CHAPTERS)" in nbval
    grading = (REPO / "tests" / "system" / "test_grading_classroom.py").read_text()
    assert 'solutions_dir().glob("ex*.ipynb")' in grading, "every exercise notebook is graded"


def test_chapter_7_runs_on_a_learner_s_folder_in_both_editions():
    """nbval runs chapters/zh/07 as well (from chapters/zh, where a learner of that edition runs it),
    with the same test values: DATA_DIR a messy folder written for the run."""
    from tests.notebook_parameters import TEST_PARAMETERS, WrittenFolder

    assert "$(ZH_NBVAL_NOTEBOOKS)" in _make_list("NBVAL_NOTEBOOKS")
    zh = _make_list("ZH_NBVAL_NOTEBOOKS")
    assert zh == ["chapters/zh/07_your_data.ipynb"] and (REPO / zh[0]).is_file(), zh
    assert isinstance(TEST_PARAMETERS["07_your_data"]["DATA_DIR"], WrittenFolder)


def _recipe(target: str) -> list[str]:
    """The recipe lines of ``target``."""
    text = (REPO / "Makefile").read_text()
    block = text.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in block.splitlines()[1:] if line.startswith("\t")]


def test_targets_say_what_they_run():
    """`make tests` both tiers, `make system` the process tier, `make check` ruff + actionlint + the unit tier."""
    text = (REPO / "Makefile").read_text()
    assert "\nunit:" not in text, "renamed: `make tests` runs both tiers"
    (tests,) = [line for line in _recipe("tests") if "pytest" in line]
    assert " pytest tests " in tests and "NBVAL" not in tests
    (system,) = [line for line in _recipe("system") if "pytest" in line]
    assert " pytest tests/system " in system
    check = _recipe("check")
    assert check[:2] == ["$(BIN)/ruff check .", "$(BIN)/actionlint"], "the workflow is linted in make check"
    assert "pytest tests/unit " in check[2]
    phony = text.split(".PHONY:", 1)[1].split("\n", 1)[0].split()
    assert {"tests", "system", "constraints", "check", "format"} <= set(phony) and "unit" not in phony


def test_make_format_formats_then_fixes():
    assert _recipe("format") == ["$(BIN)/ruff format .", "$(BIN)/ruff check --fix ."]


def test_every_pytest_run_ends_by_listing_what_was_skipped_and_why():
    assert "-rs" in _make_list("TEST_RUN")
    for target in ("tests", "system"):
        assert any("pytest" in line and " -rs " in line for line in _recipe(target)), target
