"""Build and check the chapter notebooks: ``python -m course.publishing.notebooks build|check|bootstrap``.

Authors edit the jupytext twin ``chapters/NN_name.py`` (py:percent) or the notebook;
``build`` executes the notebook top to bottom in a fresh kernel (execution counts 1..N)
and rewrites the twin from it, so the pair is always in sync. ``check`` verifies both
without executing anything (``make test`` runs it). ``bootstrap`` inserts or refreshes the
Colab/Kaggle badge and install cells after each chapter's title (``course.publishing.bootstrap``) in
the twin and the zh ``.po`` file, without executing: ``build`` the notebooks afterwards.
``build`` refreshes those cells wherever they are present, so they never drift.

The exercises' student versions (``chapters/exercises/exNN_*.ipynb`` and the Chinese ones) are
no sources: ``make assignments`` writes them from the instructor sources in ``solutions/``, which
are built and twinned like the chapters. ``check`` holds a student version unexecuted, without a
twin, and equal to what ``make assignments`` writes (its "twin" is its instructor source).
"""

from __future__ import annotations

import html
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

from common.cli import option, parse_dataclass_args, positive
from course.assignments import SOLUTIONS, is_exercise_notebook, is_student_version, student_text
from course.publishing import bootstrap as standard_cells
from course.publishing.figures import busy_readings

FORMATS = "ipynb,py:percent"


def twin_of(notebook: Path) -> Path:
    """The py:percent twin of a notebook (same folder, same stem)."""
    return notebook.with_suffix(".py")


def _read_source(path: Path) -> nbformat.NotebookNode:
    """Read a notebook from its newer of .ipynb / .py twin (the one the author edited)."""
    notebook, twin = path.with_suffix(".ipynb"), path.with_suffix(".py")
    newest = max((p for p in (notebook, twin) if p.exists()), key=lambda p: p.stat().st_mtime)
    nb = jupytext.read(newest)
    nb.metadata.setdefault("jupytext", {})["formats"] = FORMATS
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python",
                                 "name": "python3"}
    return nb


def build(path: Path, *, timeout: int = 600, allow_busy: bool = False) -> list[str]:
    """Execute a notebook in a fresh kernel, in its own folder, and write both twins.

    A timing printed as a reading (``common.readings``) on a busy machine (more runnable work than
    cores) would become the figure learners read and docs/figures.md quotes, so such a run is not
    stored unless ``allow_busy``: the readings that were busy are returned instead, and nothing is written.

    Raises:
        nbclient.exceptions.CellExecutionError: If a cell fails (nothing is written).
    """
    nb = _read_source(path)
    if path.parent.name == "chapters":  # exercises carry no standard cells
        standard_cells.bootstrap(path, nb, insert=False)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    tidy_progress_bars(nb)
    busy = busy_readings(nb, path.with_suffix(".ipynb").name)
    if busy and not allow_busy:
        return busy
    nbformat.write(nb, path.with_suffix(".ipynb"))
    jupytext.write(nb, twin_of(path.with_suffix(".ipynb")), fmt="py:percent")
    return []


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _bar_text(state: dict, model_id: str) -> str | None:
    """The final text of a tqdm notebook bar (an HBox: HTML, progress, HTML), or None."""
    box = state.get(model_id, {})
    children = box.get("state", {}).get("children", [])
    if box.get("model_name") != "HBoxModel" or len(children) != 3:
        return None
    left, bar, right = (state.get(c.removeprefix("IPY_MODEL_"), {}).get("state", {})
                        for c in children)
    if "max" not in bar or not bar.get("max"):
        return None
    filled = round(10 * min(bar.get("value", 0) / bar["max"], 1.0))
    text = f"{left.get('value', '')}|{'█' * filled}{' ' * (10 - filled)}|{right.get('value', '')}"
    return html.unescape(text).replace("\u2007", " ")


def tidy_progress_bars(nb: nbformat.NotebookNode) -> None:
    """Store progress bars as a reader last saw them, in place.

    A tqdm bar in a notebook is a widget; the text stored beside it for viewers without
    widgets (a code host) is its *first* state, "0%". This replaces that text with the
    bar's final state from the saved widget state, and drops bars that ``leave=False``
    hid when they finished (they are gone from the live notebook too).
    """
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json",
                                                {}).get("state", {})
    for cell in nb.cells:
        kept = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                kept.append(output)
                continue
            box = state.get(view["model_id"], {}).get("state", {})
            layout = state.get(str(box.get("layout", "")).removeprefix("IPY_MODEL_"), {})
            if layout.get("state", {}).get("visibility") == "hidden":
                continue
            text = _bar_text(state, view["model_id"])
            if text is not None:
                output["data"]["text/plain"] = text
            kept.append(output)
        if cell.cell_type == "code":
            cell.outputs = kept


def student_version_problems(notebook: Path) -> list[str]:
    """What is wrong with a committed student version: it must be exactly what ``make assignments``
    writes from its instructor source (``solutions/<name>`` beside it), and have no twin."""
    notebook = Path(notebook)
    source = notebook.parent / SOLUTIONS / notebook.name
    found = []
    if not source.is_file():
        found.append(f"{notebook}: a student version without an instructor source ({source} is missing)")
    elif notebook.read_text(encoding="utf-8") != student_text(source, notebook.parent):
        found.append(f"{notebook}: out of date with its instructor source {source} (run `make assignments`"
                     + (", or `make translations` for the Chinese edition)" if "zh" in notebook.parts else ")"))
    if twin_of(notebook).exists():
        found.append(f"{notebook}: a student version has no jupytext twin; remove {twin_of(notebook)} "
                     f"(edit {twin_of(source)} instead)")
    return found


def problems(notebook: Path, *, twin: bool = True) -> list[str]:
    """What is wrong with a committed notebook: execution order, errors, twin out of sync.

    ``twin=False`` for the built Chinese edition (``chapters/zh/``), which has no twin: its
    source is the English notebook plus a ``.po`` file (``course.publishing.translate``). A student version
    of the exercises is checked by ``student_version_problems`` instead.
    """
    if is_student_version(notebook):
        return student_version_problems(notebook)
    nb = nbformat.read(notebook, as_version=4)
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.get("execution_count") for c in code]
    if counts != list(range(1, len(code) + 1)):
        found.append(f"{notebook}: execution counts are {counts[:8]}..., not 1..{len(code)} "
                     "(run `python -m course.publishing.notebooks build` on it)")
    for index, cell in enumerate(code, start=1):
        if any(out.get("output_type") == "error" for out in cell.get("outputs", [])):
            found.append(f"{notebook}: code cell {index} has an error output")
    if not twin:
        return found
    pair = twin_of(notebook)
    if not pair.is_file():
        found.append(f"{notebook}: its jupytext twin {pair} is missing")
    elif jupytext.writes(nb, fmt="py:percent") != pair.read_text():
        found.append(f"{notebook}: {pair.name} is out of sync (run `python -m course.publishing.notebooks "
                     "build` or `jupytext --sync` on it)")
    return found


def insert_standard_cells(path: Path) -> str:
    """``bootstrap`` of one notebook: standard cells into its twin, the zh .po refreshed.

    Exercise notebooks are left alone (a graded notebook's first code cell is the student's
    set-up; course.assignments and course.grading process them). Returns one line saying
    what was done.
    """
    if is_exercise_notebook(path):
        return f"skipped {path.name}: exercises carry no badge or bootstrap cell"
    nb = _read_source(path)
    changed = standard_cells.bootstrap(path, nb, insert=True)
    if changed:
        jupytext.write(nb, twin_of(path.with_suffix(".ipynb")), fmt="py:percent")
    return (f"{twin_of(path.with_suffix('.ipynb')).name}: standard cells "
            f"{'written' if changed else 'already current'}; zh .po refreshed"
            + ("; run `python -m course.publishing.notebooks build` on it" if changed else ""))


@dataclass
class NotebooksConfig:
    """The command line of ``python -m course.publishing.notebooks``."""

    command: str = option("check", "build: execute and refresh the twin; check: hygiene only; "
                          "bootstrap: insert/refresh the Colab badge and install cells of "
                          "chapters (twin and zh .po; build afterwards)",
                          choices=("build", "check", "bootstrap"), positional=True)
    paths: tuple[Path, ...] = option((), ".ipynb or .py twin files", positional=True, nargs="+")
    timeout: int = option(600, "seconds per cell")
    allow_busy: bool = option(False, "build: store timings measured on a busy machine (more runnable work "
                              "than cores; each reading states its load) instead of refusing them")


def check_config(config: NotebooksConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field: every path a notebook or its twin (a .py beside
    no notebook, such as a chapter's script, is neither)."""
    problems = positive(config, "timeout")
    wrong = [str(p) for p in config.paths if p.suffix not in (".ipynb", ".py")]
    missing = [str(p) for p in config.paths if p.suffix in (".ipynb", ".py")
               and not p.with_suffix(".ipynb").is_file()]
    if wrong:
        problems["paths"] = f"not an .ipynb or .py file: {', '.join(wrong)}"
    elif missing:
        problems["paths"] = f"no such notebook, nor a twin of one: {', '.join(missing)}"
    return problems


def main(argv: list[str] | None = None) -> int:
    args = parse_dataclass_args(NotebooksConfig, argv, description=__doc__.splitlines()[0],
                                validate=check_config)
    failures = []
    for path in args.paths:
        if args.command == "build" and is_student_version(path.with_suffix(".ipynb")):
            failures.append(f"{path}: a student version is not built but generated: build "
                            f"{path.parent / SOLUTIONS / path.with_suffix('.ipynb').name}, then "
                            "`make assignments`")
        elif args.command == "build":
            start = time.perf_counter()
            busy = build(path, timeout=args.timeout, allow_busy=args.allow_busy)
            if busy:
                failures += [f"not stored, measured on a busy machine: {line}" for line in busy]
                failures.append(f"{path}: run it again on a quiet machine (or pass --allow-busy)")
            else:
                print(f"built {path.with_suffix('.ipynb')} in {time.perf_counter() - start:.0f} s",
                      flush=True)
        elif args.command == "bootstrap":
            print(insert_standard_cells(path))
        else:
            failures += problems(path.with_suffix(".ipynb"))
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
