"""A static, offline website of the executed chapter notebooks: ``python -m course.site``.

``make html`` runs ``python -m course.site --out build/html``. Every page is made by
nbconvert's HTML exporter (the stock ``lab`` template) from a notebook: the chapters
themselves, plus a landing page (the chapter map, notebook <-> guide sections), the
glossary and the troubleshooting guide, each wrapped as a one-cell Markdown notebook.
Before conversion each chapter gets a navigation line (previous / contents / next) at
its top and bottom, links to other notebooks and to GLOSSARY.md point at their pages,
and tqdm progress widgets become their final text, so nothing needs the network: plots
are embedded as data URIs and no script is loaded from a CDN (MathJax only on request).
"""

from __future__ import annotations

import html
import posixpath
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

from common.cli import option, parse_config
from common.paths import repo_root

MARKER = ".companion-site"
DOCS = {"GLOSSARY.md": ("glossary.html", "Glossary / 术语表"),
        "TROUBLESHOOTING.md": ("troubleshooting.html", "Troubleshooting")}
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


@dataclass(frozen=True)
class Chapter:
    """One executed notebook of the site: where it comes from and what its first cell says.

    Introduced in README.md (`make html`).
    """

    source: str  # repo-relative path, e.g. "chapters/02_1_dataset_dataloader.ipynb"
    page: str  # site-relative path, e.g. "02_1_dataset_dataloader.html"
    title: str
    guide_sections: str


def parse_first_cell(nb: nbformat.NotebookNode, name: str) -> tuple[str, str]:
    """Title and guide-sections text from a notebook's first (markdown) cell.

    The cell's shape is ``# Title`` then ``**Guide sections:** ...``; a missing
    guide-sections line gives ``""``.

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
    sections = [line.split(":**", 1)[1].strip() for line in lines
                if line.startswith("**Guide sections:**")]
    return titles[0], sections[0] if sections else ""


def is_executed(nb: nbformat.NotebookNode) -> bool:
    """True when the notebook has code cells and every one of them has run.

    Introduced in README.md (`make html`).
    """
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    return bool(code) and all(cell.get("execution_count") for cell in code)


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


def _href(from_page: str, to_page: str) -> str:
    return posixpath.relpath(to_page, posixpath.dirname(from_page) or ".")


def rewrite_links(text: str, *, source: str, page: str, pages: dict[str, str], root: Path,
                  files: set[str], warnings: list[str]) -> str:
    """Point relative Markdown links of ``source`` (repo-relative) at their site pages.

    A link to a notebook or doc that is a page goes to that page; a link to any other
    existing repository file (not a notebook) goes to a copy under ``_files/`` (collected
    in ``files``); a link to anything else becomes its plain text, reported in ``warnings``.

    Introduced in README.md (`make html`).
    """
    def replace(match: re.Match) -> str:
        target = match.group(2)
        if target.startswith("#") or _SCHEME.match(target):
            return match.group(0)
        path, _, fragment = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
        if repo_path in pages:
            new = _href(page, pages[repo_path])
        elif (not repo_path.startswith("..") and not repo_path.endswith(".ipynb")
              and (root / repo_path).is_file()):
            files.add(repo_path)
            new = _href(page, f"_files/{repo_path}")
        else:
            warnings.append(f"{source}: {target!r} is not in the site; its links show as text")
            return match.group(1).lstrip("!")[1:-2]
        return match.group(1) + new + (f"#{fragment}" if fragment else "") + match.group(3)

    return _LINK.sub(replace, text)


def nav_cell(chapters: list[Chapter], index: int) -> nbformat.NotebookNode:
    """The navigation line of chapter ``index``: previous, contents, glossary, next.

    Introduced in README.md (`make html`).
    """
    page = chapters[index].page
    parts = []
    if index > 0:
        parts.append(f"[← Previous: {chapters[index - 1].title}]"
                     f"({_href(page, chapters[index - 1].page)})")
    parts.append(f"[Contents]({_href(page, 'index.html')})")
    parts.append(f"[Glossary / 术语表]({_href(page, 'glossary.html')})")
    if index + 1 < len(chapters):
        parts.append(f"[Next: {chapters[index + 1].title} →]"
                     f"({_href(page, chapters[index + 1].page)})")
    return nbformat.v4.new_markdown_cell(" &nbsp;|&nbsp; ".join(parts))


def _section_key(item: str) -> tuple:
    number = re.match(r"§([\d.]+)", item)
    return tuple(int(p) for p in number.group(1).strip(".").split(".")) if number else (999,)


def _map_table(chapters: list[Chapter]) -> str:
    rows = ["| Notebook | Title | Guide sections |", "|---|---|---|"]
    for chapter in chapters:
        link = f"[{Path(chapter.source).name}]({chapter.page})"
        sections = _cell(chapter.guide_sections) or "—"
        rows.append(f"| {link} | {_cell(chapter.title)} | {sections} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def landing_notebook(chapters: list[Chapter], docs: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """The landing page as a notebook: the chapter map both ways, exercises, then the docs.

    Introduced in README.md (`make html`).
    """
    by_section: dict[str, list[str]] = {}
    for chapter in chapters:
        # Every "§x.y heading" mentioned, also inside "beyond the guide (continues §x.y ...)".
        for item in re.findall(r"§\d+(?:\.\d+)*\s+[^·()，,]+", chapter.guide_sections):
            link = f"[{Path(chapter.source).name}]({chapter.page})"
            by_section.setdefault(item.strip(), []).append(link)
    reverse = ["| Guide section | Notebooks |", "|---|---|"]
    reverse += [f"| {_cell(item)} | {', '.join(links)} |"
                for item, links in sorted(by_section.items(), key=lambda kv: _section_key(kv[0]))]
    exercises = [c for c in chapters if c.source.startswith("chapters/exercises/")]
    text = ("# PyTorch 数据管道与分布式训练 — companion notebooks\n\n"
            "The executed notebooks of `chapters/`, rendered for reading. Open a notebook in "
            "JupyterLab (`make lab`) to run it.\n\n## Chapter map\n\n"
            + _map_table([c for c in chapters if c not in exercises])
            + "\n\n## Guide sections → notebooks\n\n" + "\n".join(reverse) + "\n\n"
            + (f"## Exercises\n\nInstructor versions, solutions included (`make assignments` "
               f"writes the student versions).\n\n{_map_table(exercises)}\n\n" if exercises else "")
            + "## Reference\n\n"
            + "\n".join(f"- [{title}]({page})" for page, title in docs) + "\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    nb.metadata["title"] = "Chapter map"
    return nb


def find_chapters(root: Path, *, with_exercises: bool = True) -> tuple[list[Chapter], list[str]]:
    """The executed notebooks under ``root/chapters`` in reading order, and what was skipped.

    Chapters come first (sorted by name), then ``chapters/exercises/`` (sorted).

    Introduced in README.md (`make html`).
    """
    notebooks = sorted((root / "chapters").glob("*.ipynb"))
    if with_exercises:
        notebooks += sorted((root / "chapters" / "exercises").glob("*.ipynb"))
    chapters, skipped = [], []
    for path in notebooks:
        source = path.relative_to(root).as_posix()
        nb = nbformat.read(path, as_version=4)
        if not is_executed(nb):
            skipped.append(f"{source}: not executed (run `python -m course.notebooks build` on it)")
            continue
        title, sections = parse_first_cell(nb, source)
        page = posixpath.join(*Path(source).parent.parts[1:], path.stem + ".html")
        chapters.append(Chapter(source, page, title, sections))
    return chapters, skipped


def _prepare_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise FileExistsError(f"{out} is not empty and was not written by course.site; "
                              "pick another --out or empty it")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / MARKER).write_text("written by `python -m course.site`; rebuilt on every run\n")


def _write(exporter: HTMLExporter, nb: nbformat.NotebookNode, out: Path, page: str) -> None:
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": Path(page).stem}})
    (out / page).parent.mkdir(parents=True, exist_ok=True)
    (out / page).write_text(body, encoding="utf-8")


def build_site(root: Path, out: Path, *, with_exercises: bool = True,
               mathjax_url: str = "") -> tuple[list[Chapter], list[str]]:
    """Write the site for the repository at ``root`` into ``out``.

    Args:
        root: The repository (holds ``chapters/``, ``GLOSSARY.md``, ``TROUBLESHOOTING.md``).
        out: Output folder; replaced if an earlier build wrote it, refused otherwise.
        with_exercises: Also render ``chapters/exercises/*.ipynb`` (after the chapters).
        mathjax_url: Where pages load MathJax from; ``""`` (default) loads nothing, so the
            site works offline and formulas show as TeX source.

    Returns:
        The chapters rendered, in order, and the warnings (skipped notebooks, dead links).

    Introduced in README.md (`make html`).
    """
    root, out = Path(root).resolve(), Path(out)
    chapters, warnings = find_chapters(root, with_exercises=with_exercises)
    _prepare_out(out)
    exporter = HTMLExporter(template_name="lab", require_js_url="", mathjax_url=mathjax_url)
    docs = [(page, title) for name, (page, title) in DOCS.items() if (root / name).is_file()]
    pages = {c.source: c.page for c in chapters} | {name: page for name, (page, _) in DOCS.items()
                                                    if (root / name).is_file()}
    files: set[str] = set()
    for index, chapter in enumerate(chapters):
        nb = nbformat.read(root / chapter.source, as_version=4)
        freeze_widgets(nb)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = rewrite_links(cell.source, source=chapter.source, page=chapter.page,
                                            pages=pages, root=root, files=files, warnings=warnings)
        nb.cells = [nav_cell(chapters, index), *nb.cells, nav_cell(chapters, index)]
        nb.metadata["title"] = chapter.title
        _write(exporter, nb, out, chapter.page)
    for name, (page, title) in DOCS.items():
        if (root / name).is_file():
            text = rewrite_links((root / name).read_text(encoding="utf-8"), source=name, page=page,
                                 pages=pages, root=root, files=files, warnings=warnings)
            nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
                f"[← Contents](index.html)\n\n{text}")])
            nb.metadata["title"] = title
            _write(exporter, nb, out, page)
        else:
            warnings.append(f"{name} is missing: the site has no {page}")
    _write(exporter, landing_notebook(chapters, docs), out, "index.html")
    for repo_path in sorted(files):
        (out / "_files" / repo_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / repo_path, out / "_files" / repo_path)
    return chapters, list(dict.fromkeys(warnings))


@dataclass
class SiteConfig:
    """The command line of ``python -m course.site``."""

    out: Path = option(Path("build/html"), "output folder")
    root: Path | None = option(None, "the repository (default: found from here)")
    exercises: bool = option(True, "include chapters/exercises")
    mathjax_url: str = option("", "load MathJax from here (needs it reachable; default: none, "
                              "the site stays offline)")


def main(argv: list[str] | None = None) -> int:
    args = parse_config(SiteConfig, argv, description=__doc__.splitlines()[0])
    args.root = args.root or repo_root()
    chapters, warnings = build_site(args.root, args.out, with_exercises=args.exercises,
                                    mathjax_url=args.mathjax_url)
    for chapter in chapters:
        print(f"{chapter.source} -> {args.out / chapter.page}")
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"Site: {args.out / 'index.html'} ({len(chapters)} notebooks; open it in a browser, "
          f"or serve it: python -m http.server -d {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
