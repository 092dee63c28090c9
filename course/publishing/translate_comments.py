"""The code comments of the Chinese edition: their ``.po`` entries, and the zh code cells built from them.

Each distinct comment of a notebook is one entry of its ``.po`` file: ``msgctxt`` is
``<notebook>#comment`` for ``#`` comments and ``<notebook>#docstring`` for docstrings (so they never
collide with a markdown cell's ``<notebook>#<index>``), ``msgid`` the English (a block of full-line
comments is one entry, its lines joined by newlines, without the ``# ``), the ``#:`` references
the cells that hold it. The same comment in two cells of a notebook is translated once.

A chapter's scripts (``chapters/scripts/<number>/*.py``, run and shown by the notebook) are the
notebook's code too: their comments are entries of the same ``.po`` file (``#:`` names the file), and
``build`` writes their Chinese copies to ``chapters/zh/scripts/<number>/``, which the Chinese notebook
runs and shows. An exercise's work files (``exercises/solutions/exNN_work/*.py``) are its scripts in the
same way (``course.translate.script_folder``).

Outputs are the English ones, except where an output *shows* this notebook's code: the outputs of a
cell that calls ``show_diff`` (04_1's diffs of its ``ddp.py``) or ``show_file`` follow, line by line,
the translation of each comment or one-line docstring on a ``+``/``-``/context line, and of each comment
and docstring of a shown file (a script's usage docstring included). The outputs of ``show_source``
show files of ``common/``, which stay English, so they stay English too; so do the English string
literals in code (04_1's ``edit`` steps), since code is the same in both editions.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import re
import tokenize
from itertools import product

import nbformat

from course.publishing import code_comments
from course.publishing.code_comments import Comment

COMMENT, DOCSTRING = "comment", code_comments.DOCSTRING
#: An output follows the comment translations when its cell's source calls one of these.
FOLLOWS = ("show_diff(", "show_file(")
#: How an HTML output may escape a line of code: pygments' way, or with the quotes left as they are.
HTML_ESCAPES = ({ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;", ord('"'): "&quot;",
                 ord("'"): "&#39;"}, {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"})


def comment_context(notebook: str, comment: Comment) -> str:
    """The ``msgctxt`` of a comment of ``notebook``."""
    return f"{notebook}#{DOCSTRING if comment.kind == DOCSTRING else COMMENT}"


def is_comment_context(msgctxt: str | None) -> bool:
    return bool(msgctxt) and msgctxt.rsplit("#", 1)[-1] in (COMMENT, DOCSTRING)


def follows(cell: nbformat.NotebookNode) -> bool:
    """Whether the outputs of a code cell show this notebook's code (and so its comments)."""
    return cell.cell_type == "code" and any(call in cell.source for call in FOLLOWS)


def _one_line_docstring(code: str, everything: bool = False) -> Comment | None:
    """A diff line that is only a one-line triple-quoted string: a docstring seen in a diff."""
    text = code.strip()
    opening = code_comments.STRING_START.match(text)
    if not opening or len(opening[2]) != 3 or len(text) < 7 or not text.endswith(opening[2]) \
            or "\n" in text or opening[2] in text[len(opening[0]):-3]:
        return None
    body = text[len(opening[0]):-3]
    if not (everything or code_comments.translatable(body)) or "\\" in body:
        return None
    start = code.index(text)
    return Comment(DOCSTRING, body.strip(), start, start + len(text), "", opening[0], start,
                   start + len(text))


def _line_comments(code: str, everything: bool = False) -> list[Comment]:
    """The comments of one line of code seen out of its file (unclosed brackets are fine)."""
    if docstring := _one_line_docstring(code, everything):
        return [docstring]
    tokens = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            tokens.append(token)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    lines, starts = [code], [0, len(code) + 1]
    if not any(t.type == tokenize.COMMENT for t in tokens):
        return []
    return [c for c in code_comments.hash_comments(tokens, lines, starts, everything)
            if "\n" not in c.text]


def shown_file(text: str) -> int | None:
    """Where the file starts in an output of ``show_file`` (after its title line, ``# scripts/04_1/x.py``
    in text, the bare path in HTML), else None."""
    title, _, body = text.partition("\n")
    if title.removeprefix("# ").endswith(".py") and " -> " not in title and not body.startswith("--- "):
        return len(title) + 1
    return None


def diff_lines(text: str) -> list[tuple[int, str]]:
    """``(offset, code)`` of each ``+``, ``-`` or context line of a unified diff in ``text``."""
    found, offset = [], 0
    for line in text.split("\n"):
        if line[:1] in ("+", "-", " ") and not line.startswith(("+++ ", "--- ")) and len(line) > 1:
            found.append((offset + 1, line[1:]))
        offset += len(line) + 1
    return found


def output_comments(text: str, everything: bool = False) -> list[Comment]:
    """The comments on the code lines of a diff or a file shown in an output, offsets into ``text``."""
    if (start := shown_file(text)) is not None:
        return [dataclasses.replace(c, start=c.start + start, end=c.end + start, strip_start=c.strip_start + start,
                                    strip_end=c.strip_end + start)
                for c in code_comments.comments(text[start:], everything)]
    found = []
    for offset, code in diff_lines(text):
        for c in _line_comments(code, everything):
            found.append(Comment(c.kind, c.text, c.start + offset, c.end + offset, c.indent, c.prefix,
                                 c.strip_start + offset, c.strip_end + offset))
    return found


def _output_texts(cell: nbformat.NotebookNode) -> list[str]:
    texts = []
    for output in cell.get("outputs", []):
        if "text" in output:
            texts.append(output.text)
        texts.append(output.get("data", {}).get("text/plain", ""))
    return [t if isinstance(t, str) else "".join(t) for t in texts]


def cell_comments(cell: nbformat.NotebookNode) -> list[Comment]:
    """The comments of a code cell: its source's, then those its following outputs show."""
    if cell.cell_type != "code":
        return []
    found = code_comments.comments(cell.source)
    if follows(cell):
        found += [c for text in _output_texts(cell) for c in output_comments(text)]
    return found


def _all_comments(nb: nbformat.NotebookNode, scripts: dict[str, str] | None):
    """``(place, comment)`` of every comment: a cell's (its index), then a script's (its name)."""
    for index, cell in enumerate(nb.cells):
        for comment in cell_comments(cell):
            yield index, comment
    for name, text in sorted((scripts or {}).items()):
        for comment in code_comments.comments(text):
            yield name, comment


def wanted_entries(notebook: str, nb: nbformat.NotebookNode, scripts: dict[str, str] | None = None
                   ) -> list[tuple[str, str, list[int | str]]]:
    """``(msgctxt, msgid, places)`` of each distinct comment of a notebook and its scripts, in order;
    a place is a cell index or a script's name (``scripts/04_1/ddp.py``)."""
    found: dict[tuple[str, str], list[int | str]] = {}
    for place, comment in _all_comments(nb, scripts):
        places = found.setdefault((comment_context(notebook, comment), comment.text), [])
        if place not in places:
            places.append(place)
    return [(ctxt, msgid, places) for (ctxt, msgid), places in found.items()]


def usable(entry, msgid: str) -> bool:
    return bool(entry) and entry.msgid == msgid and bool(entry.msgstr) and "fuzzy" not in entry.flags


def _translated(notebook: str, by_key: dict, comment: Comment) -> str | None:
    entry = by_key.get((comment_context(notebook, comment), comment.text))
    return entry.msgstr if usable(entry, comment.text) else None


def _follow_text(notebook: str, by_key: dict, text: str) -> tuple[str, list[tuple[str, str]]]:
    """A diff text with its comments translated, and each ``(old, new)`` piece replaced."""
    pieces = []
    whole_file = shown_file(text) is not None  # a diff's lines stand alone: a translation there is one line
    for comment in reversed(output_comments(text)):
        translation = _translated(notebook, by_key, comment)
        if translation and not code_comments.format_problem(comment, translation) \
                and (whole_file or "\n" not in translation):
            new = code_comments.replacement(comment, translation)
            pieces.append((text[comment.start:comment.end], new))
            text = text[:comment.start] + new + text[comment.end:]
    return text, pieces


def _follow_outputs(notebook: str, by_key: dict, cell: nbformat.NotebookNode) -> None:
    for output in cell.get("outputs", []):
        if "text" in output:
            output.text, _ = _follow_text(notebook, by_key, output.text)
        data = output.get("data", {})
        if "text/plain" in data:
            data["text/plain"], pieces = _follow_text(notebook, by_key, data["text/plain"])
            for (old, new), table in product(pieces if "text/html" in data else (), HTML_ESCAPES):
                data["text/html"] = html_replace(data["text/html"], old, new, table)


def html_replace(html: str, old: str, new: str, table: dict) -> str:
    """``html`` with the code ``old`` replaced by ``new``, both escaped by ``table``. Pygments closes its
    spans at each line's end, so a piece of several lines (a docstring) is found across them and
    written back in the span its first line opens."""
    if "\n" not in old:
        return html.replace(old.translate(table), new.translate(table))
    between = r"(?:</span>)?\n(?:<span[^>]*>)?"
    found = re.search(between.join(re.escape(line.translate(table)) for line in old.split("\n")), html)
    opening = re.findall(r"<span[^>]*>", html[:found.start()]) if found else []
    if not found or not opening:
        return html
    lines = [line.translate(table) for line in new.split("\n")]
    return html[:found.start()] + ("</span>\n" + opening[-1]).join(lines) + html[found.end():]


def build_script(notebook: str, text: str, po) -> str:
    """A script of ``notebook`` with its comments translated (untranslated ones stay English)."""
    by_key = {(e.msgctxt, e.msgid): e for e in po if not e.obsolete and is_comment_context(e.msgctxt)}
    return code_comments.rewrite(text, lambda comment: _translated(notebook, by_key, comment))


def build_code_cells(notebook: str, nb: nbformat.NotebookNode, po) -> nbformat.NotebookNode:
    """``nb`` with the comments of its code cells (and the outputs that follow) translated."""
    zh = copy.deepcopy(nb)
    by_key = {(e.msgctxt, e.msgid): e for e in po if not e.obsolete and is_comment_context(e.msgctxt)}
    for cell in zh.cells:
        if cell.cell_type != "code":
            continue
        cell.source = code_comments.rewrite(
            cell.source, lambda comment: _translated(notebook, by_key, comment))
        if follows(cell):
            _follow_outputs(notebook, by_key, cell)
    return zh


def entry_problem(entry, msgid: str) -> str:
    """What keeps a ``.po`` entry from translating ``msgid`` ('' when nothing does)."""
    if entry is None or entry.msgid != msgid:
        return ("the English changed or is new since the last extract; run "
                "`python -m course.publishing.translate extract`, then translate it")
    if not entry.msgstr:
        return "not translated yet"
    if "fuzzy" in entry.flags:
        return "translation is fuzzy (the English changed); update it and remove the fuzzy flag"
    return ""


def comment_problems(notebook: str, nb: nbformat.NotebookNode, po,
                     scripts: dict[str, str] | None = None) -> list[str]:
    """Each comment of ``nb`` (and its scripts) without a current, usable translation, named by
    notebook and cell (or script)."""
    by_key = {(e.msgctxt, e.msgid): e for e in po if not e.obsolete and is_comment_context(e.msgctxt)}
    found, seen = [], set()
    for place, comment in _all_comments(nb, scripts):
        key = (comment_context(notebook, comment), comment.text)
        if key in seen:
            continue
        seen.add(key)
        entry = by_key.get(key)
        label = DOCSTRING if comment.kind == DOCSTRING else f"{comment.kind} comment"
        problem = entry_problem(entry, comment.text) or \
            code_comments.format_problem(comment, entry.msgstr)
        if problem:
            where = f"cell #{place}" if isinstance(place, int) else place
            found.append(f"{notebook} {where} {label} {comment.text.splitlines()[0][:60]!r}: {problem}")
    return found


def strip_output(text: str) -> str:
    """An output text without the comments on its diff lines: the same in both editions."""
    return code_comments.without(text, output_comments(text, everything=True))


def strip_html(html: str) -> str:
    """An HTML output as its text (tags dropped, entities decoded) without its diff comments."""
    import html as html_module

    caption_apart = html.replace("</div>", "</div>\n", 1)  # Code's caption: the title line of its text
    return strip_output(html_module.unescape(re.sub(r"<[^>]+>", "", caption_apart)))
