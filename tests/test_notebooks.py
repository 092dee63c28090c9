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
#: The built Chinese edition (course.translate): same hygiene, no jupytext twin, Chinese headings.
ZH_NOTEBOOKS = sorted((REPO / "chapters" / "zh").rglob("*.ipynb"))
ZH_IDS = [str(p.relative_to(REPO)) for p in ZH_NOTEBOOKS]


def test_there_are_chapters():
    assert any(p.name.startswith("01_") for p in NOTEBOOKS)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_executed_in_order_without_errors_and_twin_in_sync(notebook):
    assert problems(notebook) == []


@pytest.mark.parametrize("notebook", ZH_NOTEBOOKS, ids=ZH_IDS)
def test_zh_notebook_executed_in_order_without_errors(notebook):
    assert problems(notebook, twin=False) == []


@pytest.mark.parametrize("notebook", NOTEBOOKS + ZH_NOTEBOOKS, ids=IDS + ZH_IDS)
def test_first_cell_names_the_guide_sections(notebook):
    first = nbformat.read(notebook, as_version=4).cells[0]
    assert first.cell_type == "markdown"
    assert first.source.startswith("# "), "the first cell starts with the title"
    label = "对应指南章节：" if "zh" in notebook.parts else "Guide sections:"
    assert re.search(rf"^\*\*{label}\*\* .*§\d", first.source, re.M), \
        f"the first cell names the guide sections it mirrors (**{label}** §x.y ...)"
    assert "GLOSSARY.md" in first.source


CHAPTERS = [p for p in NOTEBOOKS + ZH_NOTEBOOKS if p.parent.name in ("chapters", "zh")]


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[str(p.relative_to(REPO)) for p in CHAPTERS])
def test_chapter_ends_with_summary_and_exercises(notebook):
    headings = [line for cell in nbformat.read(notebook, as_version=4).cells
                if cell.cell_type == "markdown" for line in cell.source.splitlines()
                if line.startswith("## ")]
    summary, exercises = ("## 小结", "## 练习") if "zh" in notebook.parts else (
        "## Summary", "## Exercises")
    assert summary in headings and exercises in headings
    assert headings.index(summary) < headings.index(exercises)


@pytest.mark.parametrize("notebook", NOTEBOOKS + ZH_NOTEBOOKS, ids=IDS + ZH_IDS)
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
