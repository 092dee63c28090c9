"""Committed notebooks: executed top to bottom, no errors, jupytext twin in sync, conventions."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from course.notebooks import problems

REPO = Path(__file__).resolve().parents[2]
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


#: Whatever installs or downloads, or bends the import path: shell escapes, pip or conda run
#: through subprocess, pip's internals, URL fetches, hub downloads, dataset downloads.
INSTALL_OR_DOWNLOAD = re.compile(
    r"^\s*[!%]\s*(pip|pip3|conda|mamba|micromamba|uv|apt|apt-get|wget|curl|git)\b"
    r"|[\"']pip3?[\"']\s*,\s*[\"'](install|download)[\"']|\bpip3?\s+(install|download)\b"
    r"|\bpip\.(main|_internal)|\bensurepip\b|\b(conda|mamba)[\"']?\s*,?\s*[\"']?install\b"
    r"|download=True|\burlretrieve\b|\burlopen\b|\brequests\.(get|post|Session)\b|\bhttpx\."
    r"|\btorch\.hub\.|\b(hf_hub_download|snapshot_download|load_dataset)\b"
    r"|\bsys\.path\.(append|insert|extend)\b", re.M)


def install_problems(nb: nbformat.NotebookNode, repo_root: Path = REPO) -> list[str]:
    """Code cells that install or download, except the one guarded Colab/Kaggle bootstrap.

    That cell is accepted only as the first code cell, right after the badge cell, and only
    character for character as ``course.bootstrap.bootstrap_source`` writes it for this
    repository (STYLE.md: "the one exception is a guarded bootstrap cell"); the Chinese edition's
    differs only in its translated comments.
    """
    from course.bootstrap import BADGE_START, bootstrap_source, repository
    from course.code_comments import strip

    guarded = strip(bootstrap_source(repository(repo_root)))
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    found = []
    for number, (index, cell) in enumerate(code, start=1):
        if strip(cell.source) == guarded and number == 1 and index == 2 \
                and nb.cells[1].cell_type == "markdown" and BADGE_START in nb.cells[1].source:
            continue
        for match in INSTALL_OR_DOWNLOAD.finditer(cell.source):
            found.append(f"code cell {number}: {match.group(0).strip()!r}")
    return found


@pytest.mark.parametrize("notebook", NOTEBOOKS + ZH_NOTEBOOKS, ids=IDS + ZH_IDS)
def test_no_installs_or_downloads_in_notebooks(notebook):
    assert install_problems(nbformat.read(notebook, as_version=4)) == [], \
        "no installs or downloads in a notebook, except the guarded bootstrap cell exactly as " \
        "`python -m course.notebooks bootstrap` writes it"


def test_install_rule_accepts_only_the_exact_guarded_bootstrap():
    from course.bootstrap import apply_standard_cells, bootstrap_source, repository

    repo = repository(REPO)

    def notebook(*code: str, standard: bool = True) -> nbformat.NotebookNode:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title")])
        if standard:
            apply_standard_cells(nb, repo, "01_x.ipynb")
        nb.cells += [nbformat.v4.new_code_cell(source) for source in code]
        return nb

    assert install_problems(notebook("import torch")) == []
    unguarded = bootstrap_source(repo).replace('"google.colab" in sys.modules or ', "True or ")
    bad = [notebook("!pip install torch"), notebook("%conda install numpy"),
           notebook('import subprocess, sys\nsubprocess.run([sys.executable, "-m", "pip", '
                    '"install", "x"])'),
           notebook("datasets.CIFAR10('.', download=True)"),
           notebook("from urllib.request import urlretrieve\nurlretrieve(url, 'x.zip')"),
           notebook("torch.hub.load('pytorch/vision', 'resnet18')"),
           notebook("import sys\nsys.path.insert(0, '..')"),
           notebook(unguarded, standard=False),
           notebook(bootstrap_source(repo), standard=False),  # not after the badge cell
           notebook("print(1)", bootstrap_source(repo))]  # twice: the second is not accepted
    for nb in bad:
        assert install_problems(nb), [c.source for c in nb.cells if c.cell_type == "code"]
    fork = bootstrap_source(type(repo)("someone", "fork"))
    assert install_problems(notebook(fork, standard=False)), "another repository's URL"


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


#: Absolute paths of a build machine: home and temporary folders, CI work folders, Windows users.
MACHINE_PATH = re.compile(r"(?<![\w.~-])(?:/(?:home|Users|tmp|root|work|private|var/folders|mnt|"
                          r"opt|srv|builds|github/workspace)/\S+|[A-Za-z]:\\\\Users\\\\\S+)")
#: A tqdm bar line, e.g. "epochs:  92%|█████████▏| 11/12 [...]".
BAR = re.compile(r"(\d{1,3})%\|")


def output_texts(nb) -> list[tuple[int, str]]:
    """(code cell number, text) of every text a viewer shows from the stored outputs."""
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for number, cell in enumerate(code, start=1):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                found.append((number, output.get("text", "")))
            for mime, value in output.get("data", {}).items():
                if mime.startswith("text/"):
                    found.append((number, value if isinstance(value, str) else "".join(value)))
            if output.get("output_type") == "error":
                found.append((number, "\n".join(output.get("traceback", []))))
    return found


def output_problems(nb, repo: Path = REPO) -> list[str]:
    """Machine paths and unfinished progress bars in a notebook's stored outputs."""
    found = []
    for number, text in output_texts(nb):
        for match in MACHINE_PATH.finditer(text.replace(str(repo), "/work/<repo>")):
            found.append(f"code cell {number}: absolute path {match.group(0)[:80]!r}")
        for line in text.split("\n"):
            shown = line.split("\r")[-1]  # what a terminal-like viewer shows of a \r-updated line
            bar = BAR.search(shown)
            if bar and bar.group(1) != "100":
                found.append(f"code cell {number}: unfinished progress bar {shown.strip()[:60]!r}")
    return found


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_stored_outputs_hold_no_machine_paths_and_no_unfinished_progress_bars(notebook):
    assert output_problems(nbformat.read(notebook, as_version=4)) == [], \
        "print paths relative to the repository (common.paths.display_path); rebuild with " \
        "`python -m course.notebooks build`, which stores finished bars in their final state"


def test_output_problems_finds_paths_and_frozen_bars():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="data OK at /home/ana/repo/data\n"),
        nbformat.v4.new_output("display_data", data={"text/plain": "epochs:   0%|   | 0/12"}),
        nbformat.v4.new_output("stream", name="stderr", text="a:  50%|█ | 1/2\ra: 100%|██| 2/2\n"),
        nbformat.v4.new_output("stream", name="stdout", text="relative data/shapes, 1/2 done\n"),
    ])])
    found = output_problems(nb)
    assert len(found) == 2, found
    assert "/home/ana/repo/data" in found[0] and "0%" in found[1]
    nb.cells[0].outputs[0].text = f"data OK at {REPO}/data\n"
    assert any("absolute path" in f for f in output_problems(nb))


def test_build_stores_the_final_state_of_progress_bars():
    from course.notebooks import tidy_progress_bars

    def model(name, **state):
        return {"model_name": name, "state": state}

    state = {"box": model("HBoxModel", children=["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"],
                          layout="IPY_MODEL_lay"),
             "lay": model("LayoutModel"), "l": model("HTMLModel", value="epochs:\u2007100%"),
             "p": model("FloatProgressModel", value=12.0, max=12.0),
             "r": model("HTMLModel", value="\u200712/12\u2007[00:06&lt;00:00]"),
             "hid": model("HBoxModel", children=["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"],
                          layout="IPY_MODEL_hlay"),
             "hlay": model("LayoutModel", visibility="hidden")}
    view = "application/vnd.jupyter.widget-view+json"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("display_data", data={view: {"model_id": m},
                                                     "text/plain": "epochs:   0%|  | 0/12"})
        for m in ("box", "hid")])])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    tidy_progress_bars(nb)
    outputs = nb.cells[0].outputs
    assert len(outputs) == 1, "a bar that leave=False hid is dropped"
    assert outputs[0]["data"]["text/plain"] == "epochs: 100%|██████████| 12/12 [00:06<00:00]"
    assert output_problems(nb) == []
