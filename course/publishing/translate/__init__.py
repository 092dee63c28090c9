"""The Chinese edition: ``python -m course.publishing.translate extract|build|status|check``.

The English notebooks are the source of every code cell and stored output. The Chinese of each
markdown cell lives in a gettext file ``chapters/zh/po/<stem>.po`` (one entry per markdown cell:
``msgctxt`` = ``<notebook>#<cell index>``, ``msgid`` = the English cell, ``msgstr`` = its
Chinese), so each translation records the English it was made from. The same file holds one
entry per distinct code comment and docstring (``msgctxt`` = ``<notebook>#comment`` or
``<notebook>#docstring``, see ``course.publishing.translate_comments``): the zh code cells differ from the
English only in those.

- ``extract`` updates the ``.po`` files from the English notebooks: an unchanged cell keeps its
  translation; a changed cell keeps its old translation marked ``fuzzy`` (with the old English as
  ``#| msgid``); a new cell gets an empty entry; a removed cell's entry becomes obsolete (``#~``).
- ``build`` writes ``chapters/zh/<same path>.ipynb`` for every notebook listed in
  ``chapters/zh/TRANSLATED``: the English notebook with its markdown cells and code comments
  replaced. The exercises are translated from their instructor sources
  (``exercises/solutions/exNN_*.ipynb``); ``build`` also writes the student version of each into
  ``chapters/zh/exercises/`` (``course.assignments.student_text``), as ``make assignments`` does
  for the English ones, which are generated and not translated themselves.
- A chapter's scripts (``chapters/scripts/<number>/``, the files it runs and shows) are translated with
  it: their comments are entries of its ``.po`` file, and ``build`` writes their Chinese copies to
  ``chapters/zh/scripts/<number>/``, which the Chinese notebook (in ``chapters/zh/``) runs by the same
  relative path. An exercise's work files (``exercises/solutions/exNN_work/*.py``, the scripts its checks
  run and the answer files) are translated the same way, into ``chapters/zh/exercises/solutions/exNN_work/``,
  and ``build`` hands them out beside the Chinese student version (``course.assignments.work_file_texts``:
  an answer file as the learner gets it, its ``# YOUR CODE HERE`` and solution markers kept).
- ``status`` prints, per notebook, how much is translated; notebooks not listed in TRANSLATED
  are *pending*. ``check`` fails (exit status 1) naming each notebook and cell whose translation
  is missing, fuzzy or stale, and each built notebook that is out of date.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import nbformat
import polib

from common.paths import chapters_dir
from course.assignments import (
    SOLUTIONS,
    exercises_of,
    learner_folder,
    student_text,
    work_file_texts,
)
from course.publishing import translate_comments
from course.student.messages import CHINESE

LANGUAGE = CHINESE
#: Old and new English this similar keep the old translation as a fuzzy draft.
FUZZY_SIMILARITY = 0.5


def zh_dir(chapters: Path | None = None) -> Path:
    """``chapters/zh``: the built Chinese notebooks, ``po/`` and ``TRANSLATED``."""
    return (chapters or chapters_dir()) / "zh"


def english_notebooks(chapters: Path | None = None) -> list[str]:
    """Every English notebook to translate, relative to ``chapters/`` (``01_x.ipynb``,
    ``exercises/solutions/ex01.ipynb``): the chapters and the exercises' instructor sources, not
    the student versions generated from them."""
    chapters = chapters or chapters_dir()
    found = sorted(chapters.glob("*.ipynb")) + sorted((chapters / "exercises" / SOLUTIONS).glob("*.ipynb"))
    return [p.relative_to(chapters).as_posix() for p in found]


def script_folder(notebook: str, chapters: Path | None = None) -> Path | None:
    """The folder of a notebook's scripts: ``chapters/scripts/<number>`` of a chapter (``04_1`` for
    ``04_1_ddp_fundamentals.ipynb``), ``chapters/exercises/solutions/exNN_work`` of an exercise's
    instructor source; None for any other notebook."""
    chapters = chapters or chapters_dir()
    if exercise := re.fullmatch(rf"exercises/{SOLUTIONS}/(ex\d\d)_[^/]+\.ipynb", notebook):
        return chapters / "exercises" / SOLUTIONS / f"{exercise[1]}_work"
    number = re.match(r"(\d\d(?:_\d)?)_", notebook)
    return chapters / "scripts" / number[1] if number and "/" not in notebook else None


def scripts_of(notebook: str, chapters: Path | None = None) -> dict[str, str]:
    """The texts of a notebook's scripts (the ``.py`` files of ``script_folder``, not what runs write
    in its subfolders) by their path relative to ``chapters/`` (``scripts/04_1/ddp.py``,
    ``exercises/solutions/ex04_work/broken_ddp.py``)."""
    chapters = chapters or chapters_dir()
    folder = script_folder(notebook, chapters)
    if folder is None or not folder.is_dir():
        return {}
    return {path.relative_to(chapters).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(folder.glob("*.py"))}


def built_scripts(notebook: str, po: polib.POFile, chapters: Path | None = None) -> dict[Path, str]:
    """Each Chinese script ``build`` writes for a notebook, by its path under ``chapters/zh/``."""
    chapters = chapters or chapters_dir()
    return {zh_dir(chapters) / name: translate_comments.build_script(notebook, text, po)
            for name, text in scripts_of(notebook, chapters).items()}


def zh_student_version(notebook: str, chapters: Path | None = None) -> Path | None:
    """The Chinese student version built beside a translated instructor source
    (``chapters/zh/exercises/ex01.ipynb`` for ``exercises/solutions/ex01.ipynb``); None for a chapter."""
    built = zh_dir(chapters) / notebook
    folder = learner_folder(built.parent)
    return folder / built.name if folder is not None else None


def handed_out_scripts(notebook: str, chapters: Path | None = None) -> dict[Path, str]:
    """The work files handed out beside a Chinese student version (from the built Chinese instructor
    source and its translated ``exNN_work/``), by path; empty for a chapter."""
    student = zh_student_version(notebook, chapters)
    built = zh_dir(chapters) / notebook
    if student is None or not built.is_file():
        return {}
    exercises = exercises_of(nbformat.read(built, as_version=4), name=built.name)
    return {student.parent / relative: text for relative, text in work_file_texts(built, exercises).items()}


def required(chapters: Path | None = None) -> list[str]:
    """The notebooks that must be fully translated: ``chapters/zh/TRANSLATED``, one per line."""
    listing = zh_dir(chapters) / "TRANSLATED"
    if not listing.is_file():
        return []
    lines = [line.split("#")[0].strip() for line in listing.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line]


def po_path(notebook: str, chapters: Path | None = None) -> Path:
    """The translation file of a notebook: ``chapters/zh/po/<stem>.po``."""
    return zh_dir(chapters) / "po" / (Path(notebook).stem + ".po")


def context(notebook: str, index: int) -> str:
    """The ``msgctxt`` of cell ``index`` (0-based, among all cells) of a notebook."""
    return f"{notebook}#{index}"


def markdown_cells(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """``(index, source)`` of each markdown cell."""
    return [(i, cell.source) for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"]


def _describe(notebook: str, index: int, source: str) -> str:
    first = source.strip().splitlines()[0][:60] if source.strip() else ""
    return f"{notebook} cell #{index} ({first!r})"


def _new_po(notebook: str) -> polib.POFile:
    po = polib.POFile(wrapwidth=0)
    po.metadata = {"Project-Id-Version": f"chapters/{notebook}", "Language": LANGUAGE,
                   "MIME-Version": "1.0", "Content-Type": "text/plain; charset=UTF-8",
                   "Content-Transfer-Encoding": "8bit"}
    return po


def load_po(notebook: str, chapters: Path | None = None) -> polib.POFile:
    """The notebook's ``.po`` file, or an empty one if there is none yet."""
    path = po_path(notebook, chapters)
    return polib.pofile(str(path), wrapwidth=0) if path.is_file() else _new_po(notebook)


def _kind(msgctxt: str | None) -> str:
    """``cell`` for a markdown cell's entry, ``comment`` or ``docstring`` for a code comment's."""
    return msgctxt.rsplit("#", 1)[-1] if translate_comments.is_comment_context(msgctxt) else "cell"


def wanted_entries(notebook: str, nb: nbformat.NotebookNode, scripts: dict[str, str] | None = None
                   ) -> list[tuple[str, str, list[int | str]]]:
    """``(msgctxt, msgid, places)`` of every entry the notebook needs, in cell order, then its
    scripts' comments (a place is a cell index or a script's name)."""
    cells = [(context(notebook, i), source, [i]) for i, source in markdown_cells(nb)]
    comments = translate_comments.wanted_entries(notebook, nb, scripts)
    after = len(nb.cells)  # a script's comments come after every cell
    return sorted(cells + comments, key=lambda e: (e[2][0] if isinstance(e[2][0], int) else after,
                                                   translate_comments.is_comment_context(e[0])))


def update_po(notebook: str, nb: nbformat.NotebookNode, old: polib.POFile,
              scripts: dict[str, str] | None = None) -> polib.POFile:
    """A ``.po`` for the English ``nb`` (and its scripts), keeping what ``old`` translated (see the
    module doc)."""
    po = _new_po(notebook)
    po.metadata.update({k: v for k, v in old.metadata.items() if k not in po.metadata})
    # obsolete entries too: a comment or cell that comes back (a script moved into a file) keeps its translation
    previous = sorted((e for e in old if e.msgstr), key=lambda e: e.obsolete)
    used: set[int] = set()
    wanted = wanted_entries(notebook, nb, scripts)
    matched: dict[int, polib.POEntry] = {}
    for n, (ctxt, source, _) in enumerate(wanted):  # first the unchanged ones, wherever they moved
        same = [e for e in previous if e.msgid == source and id(e) not in used
                and _kind(e.msgctxt) == _kind(ctxt)]
        same.sort(key=lambda e: e.msgctxt != ctxt)
        if same:
            used.add(id(same[0]))
            matched[n] = same[0]
    for n, (ctxt, source, cells) in enumerate(wanted):
        entry = polib.POEntry(msgctxt=ctxt, msgid=source, msgstr="")
        if _kind(ctxt) != "cell":
            entry.occurrences = [(notebook, str(i)) for i in cells]
        if n in matched:
            entry.msgstr, entry.flags = matched[n].msgstr, list(matched[n].flags)
            entry.previous_msgid = matched[n].previous_msgid
        else:  # changed: the most similar translation left over becomes a fuzzy draft
            left = [e for e in previous if id(e) not in used and _kind(e.msgctxt) == _kind(ctxt)]
            scored = [(difflib.SequenceMatcher(None, e.msgid, source).ratio(), i)
                      for i, e in enumerate(left)]
            if scored and max(scored)[0] >= FUZZY_SIMILARITY:
                draft = left[max(scored)[1]]
                used.add(id(draft))
                entry.msgstr, entry.flags = draft.msgstr, ["fuzzy"]
                entry.previous_msgid = draft.msgid
        po.append(entry)
    for stale in previous:
        if id(stale) not in used:
            stale.obsolete = True
            po.append(stale)
    return po


def problems_of(notebook: str, nb: nbformat.NotebookNode, po: polib.POFile,
                scripts: dict[str, str] | None = None) -> list[str]:
    """Each markdown cell and code comment of ``nb`` (and its scripts) without a current translation,
    named by notebook and cell (or script)."""
    by_context = {e.msgctxt: e for e in po if not e.obsolete and _kind(e.msgctxt) == "cell"}
    found = []
    for index, source in markdown_cells(nb):
        entry = by_context.get(context(notebook, index))
        if problem := translate_comments.entry_problem(entry, source):
            found.append(f"{_describe(notebook, index, source)}: {problem}")
    return found + translate_comments.comment_problems(notebook, nb, po, scripts)


def build_notebook(notebook: str, nb: nbformat.NotebookNode, po: polib.POFile
                   ) -> nbformat.NotebookNode:
    """The Chinese notebook: ``nb`` with each translated markdown cell and code comment replaced
    (and the outputs that show those comments, see ``course.publishing.translate_comments``).

    Untranslated, fuzzy or stale cells and comments stay English (``problems_of`` reports them).
    """
    zh = translate_comments.build_code_cells(notebook, nb, po)
    by_context = {e.msgctxt: e for e in po if not e.obsolete and _kind(e.msgctxt) == "cell"}
    for index, source in markdown_cells(nb):
        entry = by_context.get(context(notebook, index))
        if entry and entry.msgid == source and entry.msgstr and "fuzzy" not in entry.flags:
            zh.cells[index].source = entry.msgstr
    # No jupytext twin for the built edition: the .po file is what people edit and review.
    zh.metadata.pop("jupytext", None)
    zh.metadata["translation"] = {"language": LANGUAGE, "source": f"chapters/{notebook}",
                                  "po": f"chapters/zh/po/{Path(notebook).stem}.po"}
    return zh


def build_text(notebook: str, chapters: Path | None = None) -> str:
    """The built Chinese notebook as the text ``build`` writes."""
    chapters = chapters or chapters_dir()
    nb = nbformat.read(chapters / notebook, as_version=4)
    return nbformat.writes(build_notebook(notebook, nb, load_po(notebook, chapters))) + "\n"


def check(notebook: str, chapters: Path | None = None) -> list[str]:
    """What keeps a required notebook from being complete and built."""
    chapters = chapters or chapters_dir()
    nb = nbformat.read(chapters / notebook, as_version=4)
    po = load_po(notebook, chapters)
    found = problems_of(notebook, nb, po, scripts_of(notebook, chapters))
    expected = built_scripts(notebook, po, chapters)
    for path, text in expected.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            found.append(f"{notebook}: {shown_path(path, chapters)} is missing or out of date (run `make translations`)")
    if (folder := script_folder(notebook, chapters)) is not None:
        zh_folder = zh_dir(chapters) / folder.relative_to(chapters)
        for stale in sorted(set(zh_folder.glob("*.py")) - set(expected)) if zh_folder.is_dir() else ():
            found.append(f"{notebook}: {shown_path(stale, chapters)} has no English script any more: remove it")
    built = zh_dir(chapters) / notebook
    if not built.is_file():
        found.append(f"{notebook}: chapters/zh/{notebook} is missing (run `make translations`)")
    elif built.read_text(encoding="utf-8") != build_text(notebook, chapters):
        found.append(f"{notebook}: chapters/zh/{notebook} is out of date (run `make translations`)")
    elif (student := zh_student_version(notebook, chapters)) is not None:
        shown = shown_path(student, chapters)
        if not student.is_file():
            found.append(f"{notebook}: its student version {shown} is missing (run `make translations`)")
        elif student.read_text(encoding="utf-8") != student_text(built, student.parent):
            found.append(f"{notebook}: its student version {shown} is out of date (run `make translations`)")
        for path, text in handed_out_scripts(notebook, chapters).items():
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                found.append(f"{notebook}: the handed-out {shown_path(path, chapters)} is missing or out of date "
                             "(run `make translations`)")
    return found


def status_lines(chapters: Path | None = None, notebooks: tuple[str, ...] = ()) -> list[str]:
    """One line per English notebook (or per one of ``notebooks``): required or pending, and
    translated/fuzzy/missing counts."""
    chapters = chapters or chapters_dir()
    listed = set(required(chapters))
    lines = []
    for notebook in notebooks or english_notebooks(chapters):
        nb = nbformat.read(chapters / notebook, as_version=4)
        po, scripts = load_po(notebook, chapters), scripts_of(notebook, chapters)
        total, comments = len(markdown_cells(nb)), len(translate_comments.wanted_entries(notebook, nb, scripts))
        missing = len(problems_of(notebook, nb, po, scripts))
        untranslated = len(translate_comments.comment_problems(notebook, nb, po, scripts))
        cells = missing - untranslated
        state = "required" if notebook in listed else "pending "
        verdict = "complete" if missing == 0 else f"{cells} cells and {untranslated} comments to translate"
        lines.append(f"{state} {notebook}: {total - cells}/{total} markdown cells and "
                     f"{comments - untranslated}/{comments} comments translated, {verdict}")
    return lines


def shown_path(path: Path, chapters: Path) -> str:
    """``chapters/zh/...`` rather than an absolute path, in messages."""
    return (Path(chapters.name) / path.relative_to(chapters)).as_posix()
