"""Every chapter ends with recall questions; their answers sit with the solutions.

The last cell of each chapter notebook, English and Chinese, is a ``## Recall questions``
(``## 回顾问题``) section of 5-10 numbered questions. The answers are in one file per language,
``chapters/exercises/solutions/recall_answers.md`` and its Chinese counterpart: one ``##`` section per
chapter, titled as the chapter's first cell, numbered as its questions. A chapter names that path
as plain text and never links it, so that a learner reaches the answers only by one deliberate step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
#: The chapters, from the files: the English notebooks ``chapters/NN_*.ipynb``.
CHAPTERS = sorted((REPO / "chapters").glob("[0-9]*.ipynb"))


@dataclass(frozen=True)
class Edition:
    """One language's chapters, recall heading and answer file."""

    name: str
    folder: Path
    heading: str
    answers: str  # relative to the repository: the path a chapter names


EDITIONS = [
    Edition("en", REPO / "chapters", "## Recall questions", "chapters/exercises/solutions/recall_answers.md"),
    Edition("zh", REPO / "chapters" / "zh", "## 回顾问题", "chapters/zh/exercises/solutions/recall_answers.md"),
]
FEWEST, MOST = 5, 10
ITEM = re.compile(r"^(\d+)\.\s+\S", re.M)
#: A markdown or HTML link (inline, reference definition, autolink, href) to the answers.
LINKED = re.compile(r"\]\([^)]*recall_answers|^\s*\[[^\]]*\]:\s*\S*recall_answers"
                    r"|href\s*=\s*[\"'][^\"']*recall_answers|<[^>\s]*recall_answers[^>\s]*>", re.M)


def numbers(text: str) -> list[int]:
    """The numbers of a text's numbered-list items (``1. ...`` at the start of a line)."""
    return [int(n) for n in ITEM.findall(text)]


def title(notebook: Path) -> str:
    """A chapter's title: the first line of its first cell, without the ``# ``."""
    return nbformat.read(notebook, as_version=4).cells[0].source.splitlines()[0].removeprefix("# ").strip()


def recall_problems(nb: nbformat.NotebookNode, edition: Edition) -> list[str]:
    """What is wrong with a chapter's recall section (its last cell) and its links to the answers."""
    found = [f"markdown cell #{i} links to the answers; name {edition.answers} as plain text instead"
             for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown" and LINKED.search(cell.source)]
    last = nb.cells[-1] if nb.cells else None
    if last is None or last.cell_type != "markdown" or last.source.splitlines()[:1] != [edition.heading]:
        return [f"the last cell is not a recall section: it must start with the line {edition.heading!r}",
                *found]
    asked = numbers(last.source)
    if asked != list(range(1, len(asked) + 1)):
        found.append(f"the questions are numbered {asked}, not 1..{len(asked)}")
    if not FEWEST <= len(asked) <= MOST:
        found.append(f"{len(asked)} recall questions; a chapter asks {FEWEST} to {MOST}")
    if edition.answers not in last.source:
        found.append(f"the recall section does not name the answers' path {edition.answers}")
    return found


def question_count(nb: nbformat.NotebookNode) -> int:
    return len(numbers(nb.cells[-1].source))


def answer_sections(text: str) -> dict[str, list[int]]:
    """``## `` section title -> the numbers of its answers."""
    sections: dict[str, list[int]] = {}
    for block in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        sections[heading.strip()] = numbers(body)
    return sections


def answer_problems(sections: dict[str, list[int]], chapters: dict[str, int]) -> list[str]:
    """Chapters (title -> question count) without a matching answer section, and stray sections."""
    found = []
    for name, count in chapters.items():
        if name not in sections:
            found.append(f"no section '## {name}'")
        elif sections[name] != list(range(1, count + 1)):
            found.append(f"'## {name}': answers numbered {sections[name]}, but the chapter asks {count} "
                         "questions")
    found += [f"'## {name}' is no chapter's title" for name in sections if name not in chapters]
    return found


def test_there_are_chapters():
    assert len(CHAPTERS) >= 10 and CHAPTERS[0].name.startswith("01_")


@pytest.mark.parametrize("edition", EDITIONS, ids=[e.name for e in EDITIONS])
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_ends_with_recall_questions(chapter, edition):
    notebook = edition.folder / chapter.name
    assert notebook.is_file(), f"{notebook.relative_to(REPO)} is missing"
    assert recall_problems(nbformat.read(notebook, as_version=4), edition) == []


@pytest.mark.parametrize("edition", EDITIONS, ids=[e.name for e in EDITIONS])
def test_answers_have_a_section_per_chapter_numbered_as_its_questions(edition):
    answers = REPO / edition.answers
    assert answers.is_file(), f"{edition.answers} is missing"
    chapters = {}
    for chapter in CHAPTERS:
        nb = nbformat.read(edition.folder / chapter.name, as_version=4)
        chapters[title(edition.folder / chapter.name)] = question_count(nb)
    assert answer_problems(answer_sections(answers.read_text(encoding="utf-8")), chapters) == []


def test_the_checks_catch_a_missing_section_a_link_and_wrong_counts():
    en = EDITIONS[0]

    def chapter(*cells: str) -> nbformat.NotebookNode:
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(c) for c in cells])

    questions = "\n".join(f"{i}. Why {i}?" for i in range(1, 6))
    good = f"{en.heading}\nAnswer from memory; the answers are in `{en.answers}`.\n\n{questions}"
    assert recall_problems(chapter("# 1", "## Exercises\n1. Do it.", good), en) == []
    assert "not a recall section" in " ".join(recall_problems(chapter("# 1", "## Exercises\n1. x"), en))
    assert "4 recall questions" in " ".join(recall_problems(chapter(good.replace("5. Why 5?", "")), en))
    assert "numbered" in " ".join(recall_problems(chapter(good.replace("5. Why", "7. Why")), en))
    linked = good.replace(f"`{en.answers}`", "[the answers](exercises/solutions/recall_answers.md)")
    problems = " ".join(recall_problems(chapter("# 1", linked), en))
    assert "links to the answers" in problems and "does not name" in problems
    elsewhere = chapter("# 1", "See <a href='exercises/solutions/recall_answers.md'>them</a>.", good)
    assert "cell #1 links" in " ".join(recall_problems(elsewhere, en))

    text = "# Answers\n\n## Chapter 1\n\n1. A.\n2. B.\n\n## Chapter 9\n\n1. A.\n"
    sections = answer_sections(text)
    assert sections == {"Chapter 1": [1, 2], "Chapter 9": [1]}
    assert answer_problems(sections, {"Chapter 1": 2, "Chapter 9": 1}) == []
    problems = " ".join(answer_problems(sections, {"Chapter 1": 3, "Chapter 2": 5}))
    assert "asks 3 questions" in problems and "no section '## Chapter 2'" in problems
    assert "'## Chapter 9' is no chapter's title" in problems
