"""The chapters' figures, read from their stored outputs: ``python -m course.publishing.figures write|check|lessons``.

Every timing a chapter quotes is printed by a cell as a reading (``common.readings.read_figure``)::

    [figure 03_1/cache-vs-guide] 28.5× — the uint8 cache against the guide's pipeline
      expected ≥ 3× on a quiet machine; here 28.5× on 2 cores at load average 0.4: as expected.

- ``write`` puts a table of every reading of the committed notebooks into docs/figures.md, between the
  two marker lines (``make figures``); ``check`` fails when the file differs from what ``write`` would
  write (``make check``, through tests/unit/test_figures.py).
- ``lessons`` runs the timing chapters top to bottom at the learner's sizes, in their folder as a
  learner runs them, without writing the committed notebooks, and prints each figure beside its promise (``make
  lessons``). It is a benchmark: run it on a quiet machine; it exits 1 when a promise failed on a
  machine that was not busy.
- ``busy_readings`` names the readings of a notebook measured on a busy machine (more runnable work
  than cores): ``python -m course.publishing.notebooks build`` refuses to store those outputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from common.readings import FIGURE_LINE, MACHINE_PART

#: The lines between which ``write`` puts the table.
START = "<!-- figures:chapters:start (make figures writes this table from the notebooks' stored outputs) -->"
END = "<!-- figures:chapters:end -->"
#: The chapters whose cells time something; ``lessons`` runs these.
TIMING_CHAPTERS = ("02_1_dataset_dataloader", "03_1_efficient_pipelines", "04_1_ddp_fundamentals",
                   "04_2_ddp_training", "05_sharded_datasets", "06_1_fsdp_sharding",
                   "06_3_compile_and_resumable_loaders")


@dataclass(frozen=True)
class Figure:
    """One reading as a notebook's output shows it."""

    notebook: str
    cell: int
    key: str
    value: str
    unit: str
    what: str
    detail: str  # the second line: the promise, the machine and the verdict
    cores: int | None
    load: float | None

    @property
    def busy(self) -> bool:
        return self.load is not None and self.cores is not None and self.load > self.cores


def output_text(cell: nbformat.NotebookNode) -> str:
    """What a code cell printed (stream outputs and plain-text results), in order."""
    parts = []
    for output in cell.get("outputs", []):
        text = output.get("text") or output.get("data", {}).get("text/plain", "")
        parts.append(text if isinstance(text, str) else "".join(text))
    return "\n".join(parts)


def figures_of(nb: nbformat.NotebookNode, notebook: str) -> list[Figure]:
    """Every reading in the stored outputs of ``nb``."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        lines = output_text(cell).splitlines()
        for number, line in enumerate(lines):
            match = FIGURE_LINE.match(line)
            if not match:
                continue
            detail = lines[number + 1].strip() if number + 1 < len(lines) else ""
            machine = MACHINE_PART.search(detail)
            load = machine["load"] if machine else None
            found.append(Figure(notebook=notebook, cell=index, key=match["key"], value=match["value"],
                                unit=match["unit"], what=match["what"], detail=detail,
                                cores=int(machine["cores"]) if machine else None,
                                load=None if load in (None, "unknown") else float(load)))
    return found


def busy_readings(nb: nbformat.NotebookNode, notebook: str) -> list[str]:
    """One line per reading of ``nb`` measured with more runnable work than cores."""
    return [f"{notebook} cell {f.cell}: {f.key} measured at load average {f.load} on {f.cores} cores"
            for f in figures_of(nb, notebook) if f.busy]


def chapter_figures(chapters: Path) -> list[Figure]:
    """The readings of every English chapter, in chapter order."""
    return [figure for path in sorted(chapters.glob("*.ipynb"))
            for figure in figures_of(nbformat.read(path, as_version=4), path.name)]


def table(figures: list[Figure]) -> str:
    """The Markdown table ``write`` puts between the markers."""
    rows = ["| figure | chapter | what | value | promise, machine and verdict |", "|---|---|---|---|---|"]
    for f in figures:
        link = f"[{chapter_number(f.notebook)}](../chapters/{f.notebook})"
        rows.append(f"| `{f.key}` | {link} | {f.what} | **{f.value}{f.unit}** | {f.detail} |")
    return "\n".join(rows)


def chapter_number(notebook: str) -> str:
    """``3.1`` for ``03_1_efficient_pipelines.ipynb``, ``5`` for ``05_sharded_datasets.ipynb``."""
    match = re.match(r"(\d\d)(?:_(\d)_)?", notebook)
    return f"{int(match[1])}.{match[2]}" if match and match[2] else str(int(match[1])) if match else notebook


def rewritten(document: str, figures: list[Figure]) -> str:
    """``document`` with the table between the markers replaced."""
    if START not in document or END not in document:
        raise ValueError(f"docs/figures.md has no marker lines {START!r} ... {END!r}")
    before, rest = document.split(START, 1)
    _, after = rest.split(END, 1)
    return f"{before}{START}\n{table(figures)}\n{END}{after}"


def run_lesson(path: Path, timeout: int) -> list[Figure]:
    """Execute a chapter top to bottom in its folder, as a learner runs it, and return its readings
    (the committed notebook is not written)."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return figures_of(nb, path.name)
