"""course/publishing/figures/: docs/figures.md's chapter table is what the notebooks' stored outputs print."""

from __future__ import annotations

import nbformat
import pytest

from common.paths import repo_root
from common.readings import Machine, Reading
from course.publishing import figures

REPO = repo_root()


def _notebook(*texts: str) -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("stream", name="stdout", text=t)])
             for t in texts]
    return nbformat.v4.new_notebook(cells=cells)


def _reading(load: float) -> str:
    return str(Reading(key="03_1/cache", value=4.0, unit="×", what="the cache", expect=(">=", 3.0),
                       machine=Machine(cores=2, load=load))) + "\n"


def test_the_readings_of_a_notebook_are_found_with_their_machine():
    nb = _notebook("epoch 1\n" + _reading(0.5), "nothing here\n", _reading(3.5))
    found = figures.figures_of(nb, "03_1_efficient_pipelines.ipynb")
    assert [(f.cell, f.key, f.value, f.unit, f.load, f.busy) for f in found] == [
        (0, "03_1/cache", "4.00", "×", 0.5, False), (2, "03_1/cache", "4.00", "×", 3.5, True)]
    assert figures.busy_readings(nb, "03_1.ipynb") == ["03_1.ipynb cell 2: 03_1/cache measured at load average 3.5 on 2 cores"]


def test_the_table_goes_between_the_markers_and_nothing_else_changes():
    found = figures.figures_of(_notebook(_reading(0.5)), "03_1_efficient_pipelines.ipynb")
    document = f"# Figures\nintro\n{figures.START}\nold table\n{figures.END}\nafter\n"
    new = figures.rewritten(document, found)
    assert new.startswith("# Figures\nintro\n") and new.endswith(f"{figures.END}\nafter\n")
    assert "old table" not in new and "| `03_1/cache` | [3.1](../chapters/03_1_efficient_pipelines.ipynb) |" in new
    with pytest.raises(ValueError, match="no marker lines"):
        figures.rewritten("# Figures\n", found)


@pytest.mark.parametrize(("notebook", "number"), [("03_1_efficient_pipelines.ipynb", "3.1"),
                                                  ("05_sharded_datasets.ipynb", "5")])
def test_chapter_numbers(notebook, number):
    assert figures.chapter_number(notebook) == number


def test_docs_figures_md_is_what_make_figures_writes():
    document = (REPO / "docs" / "figures.md").read_text(encoding="utf-8")
    wanted = figures.rewritten(document, figures.chapter_figures(REPO / "chapters"))
    assert document == wanted, "docs/figures.md is out of date with the notebooks' outputs: run `make figures`"


def test_no_committed_reading_was_measured_on_a_busy_machine():
    """make notebooks refuses such runs; a notebook stored around it (a hand edit) is caught here."""
    busy = [line for path in sorted((REPO / "chapters").glob("*.ipynb"))
            for line in figures.busy_readings(nbformat.read(path, as_version=4), path.name)]
    assert not busy, "\n".join(busy[:10])
