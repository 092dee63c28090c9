"""Both READMEs list every chapter, and the Chinese one links the Chinese edition of each.

A new or renamed chapter fails here until both chapter maps list it; a chapter the zh edition
translates must be linked into ``chapters/zh/``, never to the English notebook with a "being translated"
note, which is how README.zh-CN.md went stale before.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course.translate import required

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p.name for p in (REPO / "chapters").glob("*.ipynb"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def chapter_map(readme: str) -> str:
    """The chapter-map section of a README (from its heading to the next one)."""
    text = (REPO / readme).read_text(encoding="utf-8")
    heading = "## Chapter map" if readme == "README.md" else "## 章节对照"
    assert heading in text, f"{readme} has no {heading!r} section"
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def links(section: str) -> set[str]:
    return set(LINK.findall(section))


def test_there_are_chapters_to_check():
    assert len(CHAPTERS) >= 12


@pytest.mark.parametrize("notebook", CHAPTERS)
def test_the_english_chapter_map_links_every_chapter(notebook):
    assert f"chapters/{notebook}" in links(chapter_map("README.md"))


@pytest.mark.parametrize("notebook", CHAPTERS)
def test_the_chinese_chapter_map_links_the_chinese_edition_of_every_chapter(notebook):
    found = links(chapter_map("README.zh-CN.md"))
    translated = notebook in required()
    target = f"chapters/zh/{notebook}" if translated else f"chapters/{notebook}"
    assert target in found, f"README.zh-CN.md's chapter map should link {target}"
    if translated:
        assert (REPO / target).is_file()
        assert f"chapters/{notebook}" not in found, "a translated chapter links the English notebook"


def test_no_chapter_map_links_a_missing_notebook():
    for readme in ("README.md", "README.zh-CN.md"):
        for target in links(chapter_map(readme)):
            if target.startswith("chapters/"):
                assert (REPO / target).exists(), f"{readme} links {target}, which does not exist"


def test_the_chinese_readme_marks_nothing_as_being_translated_that_is_translated():
    text = (REPO / "README.zh-CN.md").read_text(encoding="utf-8")
    pending = [nb for nb in CHAPTERS if nb not in required()]
    assert "翻译中" not in text or pending, "every chapter is translated: drop the 翻译中 notes"
