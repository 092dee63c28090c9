"""Every chapter opens with what it needs and how long it takes, marks what is optional, and ends by
pointing to the official documentation it builds on — in both editions."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((REPO / "chapters").glob("*.ipynb"))
#: The header line and the headings, per edition.
FORMS = {"en": (r"^> \*\*Prerequisites:\*\* .+ · \*\*Time:\*\* .+ · \*\*Main path:\*\* .+$", "## Further reading",
                "## Going further"),
         "zh": (r"^> \*\*前置知识：\*\* .+ · \*\*用时：\*\* .+ · \*\*主线：\*\* .+$", "## 延伸阅读", "## 延伸：")}
OFFICIAL = re.compile(r"\]\((https://(?:pytorch\.org|docs\.pytorch\.org|meta-pytorch\.org|github\.com/pytorch|"
                      r"slurm\.schedmd\.com|docs\.python\.org|pillow\.readthedocs\.io|jupyter)[^)]*)\)")


def _markdown(path: Path) -> list[str]:
    return [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"]


def _editions(path: Path) -> list[tuple[str, Path]]:
    zh = REPO / "chapters" / "zh" / path.name
    return [("en", path), *([("zh", zh)] if zh.is_file() else [])]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_title_cell_states_prerequisites_time_and_main_path(path):
    for edition, notebook in _editions(path):
        title = _markdown(notebook)[0]
        assert re.search(FORMS[edition][0], title, flags=re.M), f"{notebook.relative_to(REPO)}: no header line"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_further_reading_links_the_official_documentation(path):
    for edition, notebook in _editions(path):
        heading = FORMS[edition][1]
        cells = [text for text in _markdown(notebook) if re.search(rf"^{re.escape(heading)}$", text, flags=re.M)]
        assert cells, f"{notebook.relative_to(REPO)}: no '{heading}' section"
        section = cells[-1].split(heading, 1)[1].split("\n## ", 1)[0]
        assert len(OFFICIAL.findall(section)) >= 3, f"{notebook.relative_to(REPO)}: fewer than 3 official links"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_both_editions_mark_the_same_optional_sections(path):
    counts = {edition: sum(len(re.findall(rf"^{re.escape(FORMS[edition][2])}", text, flags=re.M))
                           for text in _markdown(notebook)) for edition, notebook in _editions(path)}
    assert len(set(counts.values())) == 1, counts
