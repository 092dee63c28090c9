"""Committed notebooks: executed top to bottom, no errors, jupytext twin in sync, conventions."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from course.notebooks import problems

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "chapters").glob("*.ipynb")) + sorted(
    (REPO / "chapters" / "exercises").glob("*.ipynb"))
IDS = [str(p.relative_to(REPO)) for p in NOTEBOOKS]


def test_there_are_chapters():
    assert any(p.name.startswith("01_") for p in NOTEBOOKS)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_executed_in_order_without_errors_and_twin_in_sync(notebook):
    assert problems(notebook) == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_first_cell_names_the_guide_sections(notebook):
    first = nbformat.read(notebook, as_version=4).cells[0]
    assert first.cell_type == "markdown"
    assert first.source.startswith("# "), "the first cell starts with the title"
    assert re.search(r"^\*\*Guide sections:\*\* .*§\d", first.source, re.M), \
        "the first cell names the guide sections it mirrors (**Guide sections:** §x.y ...)"
    assert "GLOSSARY.md" in first.source


CHAPTERS = [p for p in NOTEBOOKS if p.parent.name == "chapters"]


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_chapter_ends_with_summary_and_exercises(notebook):
    headings = [line for cell in nbformat.read(notebook, as_version=4).cells
                if cell.cell_type == "markdown" for line in cell.source.splitlines()
                if line.startswith("## ")]
    assert "## Summary" in headings and "## Exercises" in headings
    assert headings.index("## Summary") < headings.index("## Exercises")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_no_installs_or_downloads_in_notebooks(notebook):
    code = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells
                     if c.cell_type == "code")
    assert not re.search(r"^\s*[!%]\s*(pip|conda|wget|curl)\b", code, re.M)
    assert "download=True" not in code
    assert "sys.path.append" not in code and "sys.path.insert" not in code


def test_problems_detects_a_broken_notebook(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("1", execution_count=2),
        nbformat.v4.new_code_cell("1/0", execution_count=1, outputs=[nbformat.v4.new_output(
            "error", ename="ZeroDivisionError", evalue="", traceback=[])]),
    ])
    path = tmp_path / "broken.ipynb"
    nbformat.write(nb, path)
    found = " ".join(problems(path))
    assert "execution counts" in found and "error output" in found and "twin" in found
