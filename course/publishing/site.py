"""The tutorial site of the executed notebooks, built with Sphinx: ``python -m course.publishing.site``.

``make html`` runs ``python -m course.publishing.site --out build/html``. The stack is Sphinx + myst-nb +
sphinx-book-theme (configuration in ``docs/conf.py``): a sidebar with the chapters in order, an
in-page table of contents, offline full-text search (Chinese words split by jieba), previous/next
links and download buttons. This module only *stages* the sources of each edition into
``build/site-src/<edition>/`` and runs Sphinx on them, both editions at once:

- every executed chapter and the exercises' student versions (``chapters/exercises/``; with
  ``--solutions`` also their instructor sources, in a Solutions part of their own),
  rendered from their stored outputs (never executed), with their tqdm
  widgets frozen to their final text (the widget renderer would come from a CDN), an info box
  under the title (guide sections, download links for the notebook and its jupytext twin) and
  their relative links pointed at the staged pages or at copies of the repository files they name;
- the index (the chapter map both ways), the glossary, the troubleshooting guide and the pages of
  ``docs/`` (``Edition.guides``: running, command lines, figures, instructors).

The English edition is ``chapters/`` and goes to ``OUT/``; the Chinese edition is ``chapters/zh/``
and goes to ``OUT/zh/``, built as soon as ``chapters/zh/`` holds notebooks. Both editions use the
same page paths, so every page carries a switch to the same page in the other edition.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from common.cli import fail, is_dir, is_dir_or_absent, option, parse_dataclass_args
from common.paths import repo_root
from course.publishing.site_pages import (
    EDITIONS,
    Chapter,
    Edition,
    find_chapters,
    freeze_widgets,
    index_page,
    info_box,
    local_only,
    parse_first_cell,
    rewrite_links,
)

__all__ = ["MARKER", "Chapter", "build_site", "freeze_widgets", "main", "parse_first_cell",
           "rewrite_links", "stage_edition"]

MARKER = ".companion-site"
DOCS_DIR = "docs"


def _docs(root: Path, edition: Edition) -> dict[str, str]:
    """Repo path of each reference page of an edition -> its staged path."""
    docs = {}
    for staged, candidates in (("GLOSSARY.md", edition.glossary),
                               ("TROUBLESHOOTING.md", edition.troubleshooting), *edition.guides):
        found = next((c for c in candidates if (root / c).is_file()), None)
        if found:
            docs[found] = staged
    return docs


def stage_edition(root: Path, edition: Edition, chapters: list[Chapter], src: Path,
                  *, counterpart: dict[str, str]) -> list[str]:
    """Write the Sphinx sources of one edition into ``src``; returns the warnings.

    Args:
        root: The repository.
        edition: Which edition (its folders, labels and reference pages).
        chapters: Its executed notebooks, from ``find_chapters``.
        src: The staging folder (replaced).
        counterpart: Repo paths of the other edition's notebooks -> the same staged path, so a
            link from a Chinese notebook to an English one lands on the Chinese page.

    Introduced in README.md (`make html`).
    """
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    docs = _docs(root, edition)
    pages = {c.source: c.staged for c in chapters} | counterpart | docs
    files: set[str] = set()
    warnings: list[str] = []

    def links(text: str, source: str, staged: str) -> str:
        return rewrite_links(text, source=source, page=staged, pages=pages, root=root,
                             files=files, warnings=warnings)

    for chapter in chapters:
        nb = nbformat.read(root / chapter.source, as_version=4)
        freeze_widgets(nb)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = links(local_only(cell.source), chapter.source, chapter.staged)
        twin = Path(chapter.source).with_suffix(".py")
        if not (root / twin).is_file():  # the zh edition may have no twins: the code is the same
            twin = Path(chapter.twin_fallback) if chapter.twin_fallback else None
        nb.cells[0].source = info_box(nb.cells[0].source, chapter, edition,
                                      twin=twin.name if twin else None)
        target = src / chapter.staged
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        if twin:
            shutil.copy2(root / twin, target.with_name(twin.name))
    for repo_path, staged in docs.items():
        text = (root / repo_path).read_text(encoding="utf-8")
        (src / staged).write_text(links(text, repo_path, staged), encoding="utf-8")
    for name in set(_docs(root, EDITIONS["en"]).values()) - set(docs.values()):
        warnings.append(f"{edition.name}: no {name}; the site has no such page")
    (src / "index.md").write_text(index_page(chapters, edition, docs=sorted(docs.values())),
                                  encoding="utf-8")
    for repo_path in sorted(files):
        (src / "_files" / repo_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / repo_path, src / "_files" / repo_path)
    return warnings


def _prepare_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise FileExistsError(f"{out} is not empty and was not written by course.publishing.site; "
                              "pick another --out or empty it")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / MARKER).write_text("written by `python -m course.publishing.site`; rebuilt on every run\n")


def _refuse_foreign_work(work: Path) -> None:
    """A staging folder that is not empty and not stamped by us is someone else's: refused.

    ``stage_edition`` replaces ``work/<edition>``: without the stamp a user's own
    ``DIR-src/en/`` would be deleted. A staging folder from before the stamp is recognised by
    the ``_site.json`` this module writes into every edition.
    """
    ours = (work / MARKER).exists() or any((work / e / "_site.json").is_file() for e in EDITIONS)
    if work.exists() and (not work.is_dir() or (any(work.iterdir()) and not ours)):
        raise FileExistsError(f"{work} (the staging folder of --out) is not empty and was not "
                              "written by course.publishing.site; pick another --out or empty it")


def prepare_work(work: Path) -> None:
    """The staging folder: created and stamped, or reused if stamped; a stranger's is refused."""
    _refuse_foreign_work(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / MARKER).write_text("staged by `python -m course.publishing.site`; rebuilt on every run\n")


def _switch(edition: Edition, other: Edition | None, other_pages: list[str]) -> dict | None:
    if other is None:
        return None
    prefix = f"{other.subdir}/" if other.subdir else "../"
    return {"prefix": prefix, "pages": other_pages, "current": edition.labels["language"],
            "label": other.labels["language"], "hreflang": other.language}


#: How each edition's Sphinx build starts: on Linux a fork of this process, which has loaded
#: Sphinx (``_load_sphinx``); elsewhere a fresh interpreter (macOS's system libraries are not
#: safe to fork, and Windows has no fork).
_SPHINX = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")


def _load_sphinx() -> None:
    """Import Sphinx, myst-nb and the theme, and read jieba's dictionary, once in this process.

    Each edition is built in a fork of this process, which starts with all of it loaded: a
    fresh interpreter spends about 4 CPU seconds on it before it reads a page (2 of them in
    importing nbformat, whose jsonschema's rfc3987-syntax builds 38 Lark parsers), and the
    site test builds four editions.
    """
    if _SPHINX.get_start_method() != "fork":
        return
    import myst_nb.sphinx_ext  # noqa: F401
    import sphinx.builders.html
    import sphinx.cmd.build
    import sphinx.search.zh  # noqa: F401
    import sphinx_book_theme  # noqa: F401
    try:
        import jieba
    except ImportError:  # Sphinx then indexes the Chinese words without splitting them
        return
    quiet = logging.getLogger("jieba")  # not its "Building prefix dict ..." on every `make html`
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        jieba.initialize()
    finally:
        quiet.setLevel(level)


def _sphinx(argv: list[str], settings: Path, log: Path) -> None:
    """One edition's Sphinx build, in a process of its own: ``sphinx-build ARGV`` with the
    edition's settings (``docs/conf.py`` reads them), its output into ``log``."""
    os.environ["COMPANION_SITE"] = str(settings)
    # Left open: multiprocessing writes an uncaught exception there, then flushes and exits.
    stream = open(log, "w", encoding="utf-8")
    os.dup2(stream.fileno(), 1)
    os.dup2(stream.fileno(), 2)
    sys.stdout = sys.stderr = stream
    from sphinx.cmd.build import main

    sys.exit(main(argv))


def build_site(root: Path, out: Path, *, with_solutions: bool = False,
               work: Path | None = None) -> tuple[list[Chapter], list[str]]:
    """Stage and build the site for the repository at ``root`` into ``out``.

    Args:
        root: The repository (holds ``chapters/``, ``GLOSSARY.md``, ``TROUBLESHOOTING.md``).
        out: Output folder; replaced if an earlier build wrote it, refused otherwise.
        with_solutions: Also render the exercises' instructor sources (solutions and hidden
            checks) in a part of their own; by default the site has the student versions only.
        work: Where the Sphinx sources and caches go (default: ``out`` + ``-src``).

    Returns:
        The English chapters rendered, in order, and the warnings (skipped notebooks, dead links,
        Sphinx's own warnings).

    Raises:
        RuntimeError: If Sphinx fails; the message has the end of its log.

    Introduced in README.md (`make html`).
    """
    root, out = Path(root).resolve(), Path(out)
    work = (Path(work) if work else out.with_name(out.name + "-src")).resolve()
    english, warnings = find_chapters(root, EDITIONS["en"], with_solutions=with_solutions)
    chinese, zh_warnings = find_chapters(root, EDITIONS["zh"], with_solutions=with_solutions,
                                         english=english)
    editions = [(EDITIONS["en"], english)] + ([(EDITIONS["zh"], chinese)] if chinese else [])
    warnings += zh_warnings
    _refuse_foreign_work(work)  # before --out is touched
    _prepare_out(out)
    prepare_work(work)
    _load_sphinx()
    jobs = []
    for edition, chapters in editions:
        other = next(((e, c) for e, c in editions if e is not edition), None)
        src = work / edition.name
        counterpart = ({c.source: c.staged for c in other[1]} if other else {})
        warnings += stage_edition(root, edition, chapters, src, counterpart=counterpart)
        other_pages = (["index", "search", "genindex"]
                       + [d.removesuffix(".md") for d in _docs(root, other[0]).values()]
                       + [c.staged.removesuffix(".ipynb") for c in other[1]]) if other else []
        words = sorted(set(re.findall(r"[\u4e00-\u9fff]{2,}", "".join(
            (root / d).read_text(encoding="utf-8") for d in _docs(root, edition)))))
        (src / "_jieba.txt").write_text("".join(f"{w} 100000\n" for w in words), encoding="utf-8")
        settings = {"language": edition.language, "title": edition.labels["site_title"],
                    "jieba_dict": str(src / "_jieba.txt"),
                    "switch": _switch(edition, other[0] if other else None, other_pages)}
        (src / "_site.json").write_text(json.dumps(settings, ensure_ascii=False), encoding="utf-8")
        target = out / edition.subdir if edition.subdir else out
        log = work / f"{edition.name}.log"
        argv = ["-b", "html", "-q", "-c", str(repo_root() / DOCS_DIR),
                "-d", str(work / f"{edition.name}-doctrees"),
                "-w", str(work / f"{edition.name}-warnings.txt"), str(src), str(target)]
        job = _SPHINX.Process(target=_sphinx, args=(argv, src / "_site.json", log))
        job.start()
        jobs.append((edition, log, job))
    for edition, log, job in jobs:  # the two editions build side by side, one core each
        job.join()
        if job.exitcode != 0:
            said = log.read_text(encoding="utf-8")[-4000:] if log.is_file() else "(no log)"
            raise RuntimeError(f"Sphinx failed on the {edition.name} edition (exit code "
                               f"{job.exitcode}):\n{said}")
        sphinx_warnings = work / f"{edition.name}-warnings.txt"
        warnings += [f"{edition.name}: {line}" for line in
                     sphinx_warnings.read_text(encoding="utf-8").splitlines() if "WARNING" in line]
    return english, list(dict.fromkeys(warnings))


@dataclass
class SiteConfig:
    """The command line of ``python -m course.publishing.site``."""

    out: Path = option(Path("build/html"), "output folder (replaced on every run)")
    root: Path | None = option(None, "the repository (default: found from here)")
    solutions: bool = option(False, "also publish the exercises' instructor sources (solutions and "
                             "hidden checks, chapters/exercises/solutions/) in a Solutions part of their own")


def check_config(config: SiteConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field (empty when it is valid)."""
    problems = {**is_dir(config, "root"), **is_dir_or_absent(config, "out")}
    if config.root is not None and "root" not in problems \
            and not (config.root / "chapters").is_dir():
        problems["root"] = f"{config.root} has no chapters/ folder: not this repository"
    out, root = config.out.resolve(), (config.root or repo_root()).resolve()
    if "out" not in problems and (not config.out.name or out == root or out in root.parents):
        problems["out"] = (f"{config.out}: the site needs a folder of its own (it is written there, and its "
                           f"sources beside it in OUT-src), not the repository or a folder above it")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = parse_dataclass_args(SiteConfig, argv, description=__doc__.splitlines()[0],
                                validate=check_config)
    start = time.perf_counter()
    try:
        chapters, warnings = build_site(args.root or repo_root(), args.out,
                                        with_solutions=args.solutions)
    except FileExistsError as error:
        return fail(str(error), prog="course.publishing.site")
    for chapter in chapters:
        print(f"{chapter.source} -> {args.out / chapter.page}")
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    zh = " and the Chinese edition in zh/" if (args.out / "zh" / "index.html").is_file() else ""
    print(f"Site: {args.out / 'index.html'} ({len(chapters)} notebooks{zh}, "
          f"{time.perf_counter() - start:.0f} s; open it in a browser, or serve it: "
          f"python -m http.server -d {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

