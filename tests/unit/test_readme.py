"""Both READMEs list every chapter, and the Chinese one links the Chinese edition of each; README.md is
a front door from which every page of the docs is reachable, and every relative link of the docs resolves
(a file, and the heading a fragment names).

A new or renamed chapter fails here until both chapter maps list it; a chapter the zh edition
translates must be linked into ``chapters/zh/``, never to the English notebook with a "being translated"
note (such a note outlives the translation it announces).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course.publishing.translate import required

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


# --- The README as a front door: short, and every page of the docs reachable from it by links. ---

MAX_README_LINES = 200
DOCS = ["README.md", "README.zh-CN.md", "CONTRIBUTING.md", "ARCHITECTURE.md", "TROUBLESHOOTING.md",
        "TROUBLESHOOTING.zh-CN.md", "GLOSSARY.md",
        *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
_FENCED = re.compile(r"^```.*?^```", re.M | re.S)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _text(doc: str) -> str:
    return (REPO / doc).read_text(encoding="utf-8")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings (outside code blocks), repeats numbered as GitHub does."""
    found, counts = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", _FENCED.sub("", markdown), re.M):
        base = slug(heading)
        found.add(f"{base}-{counts[base]}" if base in counts else base)
        counts[base] = counts.get(base, 0) + 1
    return found


def broken_links(doc: str) -> list[str]:
    """Relative links of ``doc`` that name no file or folder, or no heading of the Markdown file named."""
    broken = []
    for target in LINK.findall(_FENCED.sub("", _text(doc))):
        if _SCHEME.match(target):
            continue
        path, _, fragment = target.partition("#")
        file = (REPO / doc).parent / path if path else REPO / doc
        if not file.exists():
            broken.append(f"{doc}: {target} (no such file)")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{doc}: {target} (no such heading)")
    return broken


def test_the_readme_is_a_front_door():
    lines = len(_text("README.md").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move a section to a page it links"


def reachable(doc: str) -> set[str]:
    """The Markdown files that ``doc`` links, and those they link, and so on (``doc`` included)."""
    seen, stack = set(), [doc]
    while stack:
        name = stack.pop()
        if name in seen or not (REPO / name).is_file():
            continue
        seen.add(name)
        for target in LINK.findall(_FENCED.sub("", _text(name))):
            path = target.partition("#")[0]
            if path.endswith(".md") and not _SCHEME.match(path):
                stack.append(((REPO / name).parent / path).resolve().relative_to(REPO.resolve()).as_posix())
    return seen


def test_every_page_of_the_docs_is_reachable_from_the_readme():
    """What leaves README.md for a page of its own stays a link or two away from it."""
    unreachable = sorted(set(DOCS) - reachable("README.md"))
    assert unreachable == [], f"README.md leads to no link to {unreachable}"


def test_the_reachability_check_finds_a_page_nothing_links(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "a.md").write_text("[b](docs/b.md#part) [w](https://x.y/c.md)\n```\n[d](d.md)\n```\n")
    (tmp_path / "docs" / "b.md").write_text("# Part\n[c](../c.md) [gone](../gone.md)\n")
    (tmp_path / "c.md").write_text("[a](a.md)\n")
    (tmp_path / "d.md").write_text("[a](a.md)\n")
    monkeypatch.setitem(globals(), "REPO", tmp_path)
    assert reachable("a.md") == {"a.md", "docs/b.md", "c.md"}


@pytest.mark.parametrize("doc", DOCS)
def test_every_relative_link_of_the_docs_resolves(doc):
    assert broken_links(doc) == []


def test_the_link_check_catches_a_missing_file_and_a_missing_heading(tmp_path, monkeypatch):
    (tmp_path / "a.md").write_text("# Top\n\n## Two `words` (here)\n\n## Top\n\n```\n# not a heading\n```\n"
                                   "[ok](#two-words-here) [f](b.md) [h](#not-a-heading) [w](https://x.y) "
                                   "[again](a.md#top-1) [no](a.md#top-2)\n")
    monkeypatch.setitem(globals(), "REPO", tmp_path)
    assert broken_links("a.md") == ["a.md: b.md (no such file)", "a.md: #not-a-heading (no such heading)",
                                    "a.md: a.md#top-2 (no such heading)"]


def _next_places(readme: str, heading: str) -> dict[str, str]:
    """Link target (without fragment) -> the line that links it, in a README's where-to-go section."""
    section = _text(readme).split(heading, 1)[1].split("\n## ", 1)[0]
    return {target.split("#")[0]: line for line in section.splitlines()
            for target in LINK.findall(line) if not _SCHEME.match(target)}


def test_the_chinese_readme_links_the_same_next_places_and_says_which_are_english():
    english = _next_places("README.md", "## Where to go next")
    chinese = _next_places("README.zh-CN.md", "## 接下来去哪里")
    assert len(english) >= 8
    for target in english:
        twin = re.sub(r"\.md$", ".zh-CN.md", target)
        found = twin if twin in chinese else target
        assert found in chinese, f"README.zh-CN.md's 接下来去哪里 does not link {target} (or {twin})"
        english_only = (found == target and found.endswith(".md") and not (REPO / twin).exists()
                        and not found.endswith(".zh-CN.md") and found != "GLOSSARY.md")  # both languages
        if english_only:
            assert "英文" in chinese[found], f"README.zh-CN.md links {found}, which is English only: say （英文）"
