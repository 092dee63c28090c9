"""Every ``show_source`` output stored in a chapter or exercise notebook (both editions) is the
source as it is now: the title's file and first line, and the text from there. An edit above a
shown function moves it, one inside it changes it; either leaves the reader a stale listing. So is
every ``show_file`` output: the whole script, its path relative to the notebook (the Chinese
edition's copies with translated comments under ``chapters/zh``)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(path for path in (REPO / "chapters").rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in path.parts)
#: ``Code.__repr__``'s first line for a titled ``show_source`` listing (common/source.py).
TITLE = re.compile(r"^# ((?:common|course)/[\w/]+\.py), line (\d+)\n")
#: ``show_file``'s: a script's path as the notebook gives it.
FILE_TITLE = re.compile(r"^# ([\w./-]+\.py)\n")


def _outputs(notebook: Path) -> list[str]:
    # The text/plain of every stored output of notebook.
    texts = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            plain = output.get("data", {}).get("text/plain", "")
            texts.append("".join(plain) if isinstance(plain, list) else plain)
    return texts


def listings(notebook: Path) -> list[tuple[str, int, str]]:
    """``(file, first line, text)`` of each stored ``show_source`` output of ``notebook``."""
    return [(match[1], int(match[2]), text[match.end():])
            for text in _outputs(notebook) if (match := TITLE.match(text))]


def files(notebook: Path) -> list[tuple[Path, str]]:
    """``(path, text)`` of each stored ``show_file`` output of ``notebook``."""
    return [(notebook.parent / match[1], text[match.end():])
            for text in _outputs(notebook) if (match := FILE_TITLE.match(text))]


def current(file: str, first: int, length: int) -> str:
    """What ``show_source`` shows now for ``length`` lines of ``file`` from line ``first``."""
    lines = (REPO / file).read_text(encoding="utf-8").splitlines(keepends=True)
    return textwrap.dedent("".join(lines[first - 1:first - 1 + length]))


def test_the_notebooks_store_listings_to_check():
    assert sum(len(listings(notebook)) for notebook in NOTEBOOKS) >= 40


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: str(path.relative_to(REPO)))
def test_each_stored_listing_is_the_source_as_it_is_now(notebook):
    stale = [f"{file}, line {first}" for file, first, text in listings(notebook)
             if current(file, first, len(text.splitlines())).rstrip("\n") != text.rstrip("\n")]
    assert stale == [], f"{notebook.name}: run the chapter again, or regenerate these listings: {stale}"


def test_the_notebooks_store_scripts_to_check():
    assert sum(len(files(notebook)) for notebook in NOTEBOOKS) >= 30


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: str(path.relative_to(REPO)))
def test_each_stored_script_is_the_file_as_it_is_now(notebook):
    stale = [str(path.relative_to(REPO)) for path, text in files(notebook)
             if not path.is_file() or path.read_text(encoding="utf-8").rstrip("\n") != text.rstrip("\n")]
    assert stale == [], f"{notebook.name}: run the chapter again: {stale}"


def test_a_moved_or_changed_listing_is_caught():
    file, first, text = next(item for notebook in NOTEBOOKS for item in listings(notebook))
    length = len(text.splitlines())
    assert current(file, first, length).rstrip("\n") == text.rstrip("\n")
    assert current(file, first + 1, length).rstrip("\n") != text.rstrip("\n")
