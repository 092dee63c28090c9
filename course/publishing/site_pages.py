"""The pages of the tutorial site, as Sphinx sources: which notebooks, their links, the index.

``course.publishing.site`` stages these and runs Sphinx; everything here is plain text and notebook
manipulation, testable without Sphinx.
"""

from __future__ import annotations

import html
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course.assignments import BEGIN_HIDDEN, BEGIN_SOLUTION, SOLUTIONS

_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
GUIDE_SECTIONS = "**Guide sections:**"
#: The guide-sections line of a first cell, in each edition's words ("**对应指南章节：**" in zh).
GUIDE_SECTIONS_LINES = (GUIDE_SECTIONS, "**对应指南章节：**")
# A guide heading as the first cells name it: "§2.2.1 Dataset与DataLoader类" (its title has no spaces).
_HEADING = re.compile(r"§\d+(?:\.\d+)*\s+[^\s·()（）；;，,、]+")
# What may follow a heading that is named on its own ("· §2.2", "§2.1 ... (§2.1.2 ...)", line end).
_HEADING_END = re.compile(r"\s*(?:$|[·()（）；;，,、])")


@dataclass(frozen=True)
class Edition:
    """One language edition of the site: where its notebooks are and the words of its pages.

    Introduced in README.md (`make html`).
    """

    name: str
    language: str  # Sphinx's language code
    chapters: str  # repo folder of the chapter notebooks
    subdir: str  # where it goes under the output folder ("" = the root)
    glossary: tuple[str, ...]  # candidate repo paths, first existing wins
    troubleshooting: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)
    # The pages of docs/: (staged name, candidate repo paths, first existing wins).
    guides: tuple[tuple[str, tuple[str, ...]], ...] = ()


#: The pages of docs/ in the English edition; the Chinese one uses a zh-CN twin where one exists.
GUIDES = ("running.md", "scripts.md", "parallelism.md", "figures.md", "instructors.md")
_EN_GUIDES = tuple((name, (f"docs/{name}",)) for name in GUIDES)
_ZH_GUIDES = tuple((name, (f"docs/{name.removesuffix('.md')}.zh-CN.md", f"docs/{name}"))
                   for name in GUIDES)

EDITIONS = {
    "en": Edition("en", "en", "chapters", "", ("GLOSSARY.md",), ("TROUBLESHOOTING.md",), {
        "language": "English", "site_title": "PyTorch data pipelines & distributed training",
        "heading": "PyTorch data pipelines & distributed training — companion notebooks",
        "intro": ("The executed notebooks of the companion to the guide 《PyTorch大规模深度学习搭建："
                  "数据管道与分布式训练指南》, rendered for reading. Run them yourself with "
                  "`make lab`; every page has its notebook and its `.py` twin to download."),
        "map": "Chapter map", "reverse": "Guide sections → notebooks", "exercises": "Exercises",
        "exercises_note": ("The notebooks to work in: write your answers in the cells marked "
                           "`# YOUR CODE HERE` and run the check cells below them; "
                           "`make grade SUBMISSIONS=<your folder>` runs the hidden checks too."),
        "solutions_apart": ("The solutions are not part of this site: they are in the repository's "
                            "`chapters/exercises/solutions/`."),
        "solutions": "Solutions",
        "solutions_note": ("The instructor versions of the exercise notebooks: the solutions and the "
                           "hidden checks. Try the exercises first."),
        "reference": "Reference", "notebook": "Notebook", "title": "Title",
        "sections": "Guide sections", "download": "Download", "chapters": "Chapters",
        "colon": ":",
        "GLOSSARY.md": "Glossary / 术语表", "TROUBLESHOOTING.md": "Troubleshooting",
        "running.md": "Running anywhere: CPU only, GPUs, a Mac, Colab, conda",
        "scripts.md": "The chapters' command lines", "figures.md": "Figures",
        "parallelism.md": "Where DDP and FSDP sit: a map of the parallelisms",
        "instructors.md": "For instructors: assignments and grading"}, guides=_EN_GUIDES),
    "zh": Edition("zh", "zh_CN", "chapters/zh", "zh", ("GLOSSARY.md",),
                  ("TROUBLESHOOTING.zh-CN.md", "TROUBLESHOOTING.md"), {
        "language": "中文", "site_title": "PyTorch 数据管道与分布式训练",
        "heading": "PyTorch 数据管道与分布式训练 —— 配套笔记本",
        "intro": ("《PyTorch大规模深度学习搭建：数据管道与分布式训练指南》配套笔记本的中文版，"
                  "含已执行的输出。用 `make lab` 亲自运行；每页都可下载对应的笔记本及其 `.py` 版本。"),
        "map": "章节对照", "reverse": "指南章节 → 笔记本", "exercises": "练习",
        "exercises_note": ("在这些笔记本里做练习：在标有 `# YOUR CODE HERE` 的单元格中写答案，再运行下方的检查"
                           "单元格；`make grade SUBMISSIONS=<你的文件夹>` 还会运行隐藏的检查。"),
        "solutions_apart": "参考答案不在本网站上，而在仓库的 `chapters/zh/exercises/solutions/` 中。",
        "solutions": "参考答案",
        "solutions_note": "练习笔记本的教师版：参考答案和隐藏的检查。请先自己做练习。",
        "reference": "参考", "notebook": "笔记本", "title": "标题", "sections": "对应指南章节",
        "download": "下载", "chapters": "章节", "colon": "：",
        "GLOSSARY.md": "术语表 / Glossary", "TROUBLESHOOTING.md": "故障排查",
        "running.md": "在各种环境中运行：只有 CPU、GPU、Mac、Colab、conda", "scripts.md": "各章的命令行工具（英文）",
        "figures.md": "测量数据（英文）", "instructors.md": "给教师：布置与评分",
        "parallelism.md": "DDP 和 FSDP 处在什么位置：各种并行方式一览"}, guides=_ZH_GUIDES),
}


@dataclass(frozen=True)
class Chapter:
    """One executed notebook of the site: where it comes from and what its first cell says.

    Introduced in README.md (`make html`).
    """

    source: str  # repo-relative path, e.g. "chapters/zh/02_1_dataset_dataloader.ipynb"
    staged: str  # path in the Sphinx sources, the same in both editions
    title: str
    guide_sections: str
    twin_fallback: str = ""  # the English twin, for an edition without its own

    @property
    def page(self) -> str:
        """The page's path in its edition's site, e.g. ``chapters/01_x.html``."""
        return self.staged.removesuffix(".ipynb") + ".html"

    @property
    def is_exercise(self) -> bool:
        """A student version of the exercises (``chapters/exercises/exNN_*.ipynb``)."""
        return "/exercises/" in self.staged and not self.is_solution

    @property
    def is_solution(self) -> bool:
        """An instructor source (``chapters/exercises/solutions/``): solutions and hidden checks."""
        return f"/exercises/{SOLUTIONS}/" in self.staged


def parse_first_cell(nb: nbformat.NotebookNode, name: str) -> tuple[str, str]:
    """Title and guide-sections text from a notebook's first (markdown) cell.

    The cell's shape is ``# Title`` then ``**Guide sections:** ...`` (in the Chinese edition
    ``**对应指南章节：** ...``); a missing guide-sections line gives ``""``.

    Raises:
        ValueError: If the first cell is not markdown or has no ``# `` title line.

    Introduced in README.md (`make html`).
    """
    if not nb.cells or nb.cells[0].cell_type != "markdown":
        raise ValueError(f"{name}: the first cell must be markdown starting with '# Title'")
    lines = [line.strip() for line in nb.cells[0].source.splitlines()]
    titles = [line[2:].strip() for line in lines if line.startswith("# ")]
    if not titles:
        raise ValueError(f"{name}: the first cell has no '# Title' line")
    sections = [line[len(marker):].strip() for line in lines for marker in GUIDE_SECTIONS_LINES
                if line.startswith(marker)]
    return titles[0], sections[0] if sections else ""


def is_executed(nb: nbformat.NotebookNode) -> bool:
    """True when the notebook has code cells and every one of them has run.

    Introduced in README.md (`make html`).
    """
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    return bool(code) and all(cell.get("execution_count") for cell in code)


def holds_solutions(nb: nbformat.NotebookNode) -> bool:
    """True when a cell holds a solution or hidden checks (nbgrader's markers).

    Introduced in README.md (`make html`).
    """
    return any(BEGIN_SOLUTION in cell.source or BEGIN_HIDDEN in cell.source for cell in nb.cells)


def find_chapters(root: Path, edition: Edition, *, with_solutions: bool = False,
                  english: list[Chapter] | None = None) -> tuple[list[Chapter], list[str]]:
    """The notebooks of an edition in reading order, and what was skipped.

    The executed chapters come first (sorted by name), then the edition's ``exercises/``: the
    student versions (sorted; unexecuted, as a learner gets them), and with ``with_solutions`` the
    instructor sources of ``exercises/solutions/`` after them. An exercise notebook that holds a
    solution or hidden checks is left out of the student versions. A Chinese notebook takes its
    guide sections from its first cell, else from the English notebook of the same name
    (``english``).

    Introduced in README.md (`make html`).
    """
    folder = root / edition.chapters
    exercises = sorted((folder / "exercises").glob("*.ipynb"))
    solutions = sorted((folder / "exercises" / SOLUTIONS).glob("*.ipynb")) if with_solutions else []
    by_stage = {c.staged: c for c in english or []}
    chapters, skipped = [], []
    for path in sorted(folder.glob("*.ipynb")) + exercises + solutions:
        source = path.relative_to(root).as_posix()
        nb = nbformat.read(path, as_version=4)
        if path in exercises and holds_solutions(nb):
            skipped.append(f"{source}: holds solutions or hidden checks, so it is no student version "
                           f"(instructor sources go in exercises/{SOLUTIONS}/; `make assignments`)")
            continue
        if path not in exercises and not is_executed(nb):
            skipped.append(f"{source}: not executed (run `python -m course.publishing.notebooks build` on it)")
            continue
        title, sections = parse_first_cell(nb, source)
        staged = "chapters/" + path.relative_to(folder).as_posix()
        same = by_stage.get(staged)
        twin = same.source.removesuffix(".ipynb") + ".py" if same else ""
        chapters.append(Chapter(source, staged, title, sections or (same.guide_sections
                                                                    if same else ""),
                                twin if twin and (root / twin).is_file() else ""))
    return chapters, skipped


def _text_of(model_id: str, state: dict) -> str:
    """Plain text of a stored widget: HTML values, a text bar for progress, boxes joined."""
    model = state.get(model_id.removeprefix("IPY_MODEL_"), {})
    name, values = model.get("model_name", ""), model.get("state", {})
    if name in ("HBoxModel", "VBoxModel"):
        return "".join(_text_of(child, state) for child in values.get("children", []))
    if name in ("FloatProgressModel", "IntProgressModel"):
        span = (values.get("max") or 1) - (values.get("min") or 0)
        filled = round(10 * ((values.get("value") or 0) - (values.get("min") or 0)) / span)
        return "|" + "█" * max(0, min(10, filled)) + " " * (10 - max(0, min(10, filled))) + "|"
    text = html.unescape(re.sub(r"<[^>]+>", "", str(values.get("value", ""))))
    return text.replace("\u2007", " ")


def freeze_widgets(nb: nbformat.NotebookNode) -> None:
    """Replace widget outputs (tqdm bars) by the text of their final stored state, in place.

    Without this the page would fetch the widget renderer from a CDN and show nothing
    offline; the stored state has the finished bar, e.g. ``epochs: 100%|██████████| 5/5``.

    Introduced in README.md (`make html`).
    """
    state = nb.metadata.pop("widgets", {}).get(_WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).pop(_WIDGET_VIEW, None)
            if view and view.get("model_id") in state:
                output["data"]["text/plain"] = _text_of(view["model_id"], state)


_REMOTE_IMAGE_LINK = re.compile(r"\[!\[([^\]]*)\]\((https?://[^)\s]+)\)\]\(([^)\s]+)\)")


def local_only(text: str) -> str:
    """A linked image from another host (the Colab and Kaggle badges) as a plain text link.

    On a code host the badges are images; the site loads nothing from another host, so there
    the same link shows its alt text.

    Introduced in README.md (`make html`).
    """
    return _REMOTE_IMAGE_LINK.sub(lambda m: f"[{m.group(1)}]({m.group(3)})", text)


def _href(from_page: str, to_page: str) -> str:
    return posixpath.relpath(to_page, posixpath.dirname(from_page) or ".")


def rewrite_links(text: str, *, source: str, page: str, pages: dict[str, str], root: Path,
                  files: set[str], warnings: list[str]) -> str:
    """Point relative Markdown links of ``source`` (repo-relative) at their staged pages.

    ``page`` is where ``source`` is staged. A link to a notebook or doc of the site goes to its
    staged source (Sphinx turns it into a page link; a fragment is lower-cased to the heading
    anchor Sphinx makes); a link to any other existing repository file (not a notebook) goes to
    a copy under ``_files/`` (collected in ``files``; Sphinx makes it a download); a link to
    anything else becomes its plain text, reported in ``warnings``.

    Introduced in README.md (`make html`).
    """
    def replace(match: re.Match) -> str:
        target = match.group(2)
        if target.startswith("#") or _SCHEME.match(target):
            return match.group(0)
        path, _, fragment = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
        if repo_path in pages:
            new = _href(page, pages[repo_path]) + (f"#{fragment.lower()}" if fragment else "")
        elif (not repo_path.startswith("..") and not repo_path.endswith((".ipynb", ".md"))
              and (root / repo_path).is_file()):
            # A Markdown file that is no page of this edition is the other edition's (e.g.
            # TROUBLESHOOTING.zh-CN.md): the language switch on every page links it instead.
            files.add(repo_path)
            new = _href(page, f"_files/{repo_path}")
        else:
            warnings.append(f"{source}: {target!r} is not in the site; its links show as text")
            return match.group(1).lstrip("!")[1:-2]
        return match.group(1) + new + match.group(3)

    return _LINK.sub(replace, text)


def info_box(first_cell: str, chapter: Chapter, edition: Edition, *, twin: str | None) -> str:
    """The first cell with, under its title, a box: guide sections and the download links.

    The cell's own guide-sections line (``**Guide sections:**``, ``**对应指南章节：**``) moves into
    the box, which is in the edition's words.

    Introduced in README.md (`make html`).
    """
    labels, name = edition.labels, posixpath.basename(chapter.staged)
    downloads = [f"{{download}}`{name} <{name}>`"] + ([f"{{download}}`{twin} <{twin}>`"]
                                                      if twin else [])
    box = [":::{container} page-info"]
    if chapter.guide_sections:
        box.append(f"**{labels['sections']}{labels['colon']}** {chapter.guide_sections}\n")
    box += [f"**{labels['download']}{labels['colon']}** " + " · ".join(downloads), ":::"]
    lines = [line for line in first_cell.splitlines()
             if not line.startswith(GUIDE_SECTIONS_LINES)]
    title = next(i for i, line in enumerate(lines) if line.startswith("# "))
    return "\n".join(lines[:title + 1] + ["", *box, ""] + lines[title + 1:])


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _section_key(item: str) -> tuple:
    number = re.match(r"§([\d.]+)", item)
    return tuple(int(p) for p in number.group(1).strip(".").split(".")) if number else (999,)


def _map_table(chapters: list[Chapter], labels: dict[str, str]) -> str:
    rows = [f"| {labels['title']} | {labels['sections']} |", "|---|---|"]
    for chapter in chapters:
        link = f"[{_cell(chapter.title)}]({chapter.staged})"
        rows.append(f"| {link} | {_cell(chapter.guide_sections) or '—'} |")
    return "\n".join(rows)


def guide_headings(chapters: list[Chapter]) -> dict[str, str]:
    """``"§2.2.1"`` -> ``"§2.2.1 Dataset与DataLoader类"``: each guide heading some chapter names on
    its own (in a ``·`` list, before a bracket or a comma, or at the end), so that prose around a
    section number ("以 §2.2.1 Dataset与DataLoader类 为基础", "指南在 §2.3.1 处中断") maps to it.

    Introduced in README.md (`make html`).
    """
    named: dict[str, str] = {}
    for chapter in chapters:
        for match in _HEADING.finditer(chapter.guide_sections):
            if _HEADING_END.match(chapter.guide_sections, match.end()):
                named.setdefault(match.group(0).split()[0], match.group(0))
    return named


def _toctree(caption: str, entries: list[str]) -> str:
    body = "\n".join(entry.removesuffix(".ipynb").removesuffix(".md") for entry in entries)
    return f"```{{toctree}}\n:caption: {caption}\n:maxdepth: 1\n:hidden:\n\n{body}\n```\n"


def index_page(chapters: list[Chapter], edition: Edition, *, docs: list[str]) -> str:
    """The index page (MyST): the chapter map both ways, the exercises (and, apart, their
    solutions where the site has them), the reference pages, and the toctrees that make the
    sidebar (chapters in reading order).

    Introduced in README.md (`make html`).
    """
    labels = edition.labels
    main = [c for c in chapters if not c.is_exercise and not c.is_solution]
    exercises = [c for c in chapters if c.is_exercise]
    solutions = [c for c in chapters if c.is_solution]
    by_section: dict[str, list[str]] = {}
    named = guide_headings(chapters)
    for chapter in chapters:
        # Every "§x.y heading" mentioned, also inside "beyond the guide (continues §x.y ...)".
        for match in _HEADING.finditer(chapter.guide_sections):
            item = named.get(match.group(0).split()[0])
            link = f"[{posixpath.basename(chapter.staged)}]({chapter.staged})"
            if item and link not in by_section.get(item, []):
                by_section.setdefault(item, []).append(link)
    reverse = [f"| {labels['sections']} | {labels['notebook']} |", "|---|---|"]
    reverse += [f"| {_cell(item)} | {', '.join(links)} |"
                for item, links in sorted(by_section.items(), key=lambda kv: _section_key(kv[0]))]
    parts = [f"# {labels['heading']}\n", labels["intro"] + "\n",
             f"## {labels['map']}\n", ":::{table}\n:class: chapter-map\n\n"
             + _map_table(main, labels) + "\n:::\n",
             f"## {labels['reverse']}\n", "\n".join(reverse) + "\n"]
    for name, part in (("exercises", exercises), ("solutions", solutions)):
        note = labels[f"{name}_note"] + ("" if solutions or name == "solutions" else " " + labels["solutions_apart"])
        if part:
            parts += [f"## {labels[name]}\n", note + "\n", _map_table(part, labels) + "\n"]
    parts += [f"## {labels['reference']}\n",
              "\n".join(f"- [{labels[doc]}]({doc})" for doc in docs) + "\n",
              _toctree(labels["chapters"], [c.staged for c in main])]
    for name, part in (("exercises", exercises), ("solutions", solutions)):
        if part:
            parts.append(_toctree(labels[name], [c.staged for c in part]))
    parts.append(_toctree(labels["reference"], docs))
    return "\n".join(parts)
