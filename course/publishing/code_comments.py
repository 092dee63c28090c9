"""The comments of a code cell, found with ``tokenize``: what the Chinese edition translates.

A code cell's *comments* are its ``#`` comments (a run of full-line comments at one column is
one block, a comment after code is a trailing one) and its docstrings: those of the functions and
classes it defines (also in a ``%%writefile x.py`` script) and a module's, the string a script file
starts with (its usage, which ``argparse`` may show as ``__doc__``). Strings that contain ``#`` are code,
never comments. Markers stay as they are and are never offered for translation: ``# NBVAL_*``,
``# noqa``, ``# type:``, ``# pragma``, ``# fmt:``, jupytext's ``# %%`` / ``# +`` / ``# -``,
nbgrader's ``### BEGIN SOLUTION`` and the like, shebangs and coding lines; a comment with no Latin
word or with Chinese already in it is left alone too.

``comments(source)`` lists them; ``rewrite(source, replace)`` puts a new text in place of each
(keeping the indentation and the column where a trailing comment starts); ``strip(source)`` is
the code without them, which must be the same in both editions.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass

#: Cell magics whose body is Python (other cell magics, e.g. ``%%bash``, are left alone).
PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture")
MARKER = re.compile(r"#+\s*(NBVAL_|noqa|type:|pragma|fmt:|ruff:|pylint:|%|\+(\s|$)|-\s*$|!|-\*-|"
                    r"(BEGIN|END) (SOLUTION|HIDDEN TESTS)|YOUR CODE HERE|In\[)")
#: A marker after the text of a comment (a noqa, say): kept, never translated.
MARKER_SUFFIX = re.compile(r"\s+#\s*(noqa|type:|pragma|NBVAL_)")
LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
PREFIX = re.compile(r"#+:?[ \t]?")
STRING_START = re.compile(r"([rRuU]?)(\"\"\"|'''|\"|')")
DOCSTRING = "docstring"


@dataclass(frozen=True)
class Comment:
    """One translatable comment of a source: ``text`` is what a translator sees (the msgid)."""

    kind: str  # "block", "trailing" or "docstring"
    text: str
    start: int  # offsets into the source: source[start:end] is what a translation replaces
    end: int
    indent: str  # blocks: the text before each line's "#"; docstrings: their continuation indent
    prefix: str  # blocks and trailing comments: "# " (or "#: "); docstrings: 'r"""' and the like
    strip_start: int  # source[strip_start:strip_end] is what ``strip`` removes
    strip_end: int
    closing_line: bool = False  # docstrings: the closing quotes stand on a line of their own
    closing_indent: str | None = None  # ... indented so (None: as ``indent``)


def translatable(text: str) -> bool:
    """Text worth translating: some English, no Chinese yet."""
    return bool(LATIN_WORD.search(text)) and not CJK.search(text)


def python_part(source: str) -> tuple[int, str] | None:
    """``(offset, text)`` of the Python in a cell, line magics and shell lines blanked out
    (lengths kept, so offsets hold); None for a cell whose body is not Python."""
    offset = 0
    first = source.split("\n", 1)[0].strip()
    if first.startswith("%%"):
        words = first.split()
        python = (words[0] == "%%writefile" and len(words) > 1 and words[-1].endswith(".py")) \
            or words[0] in PYTHON_CELL_MAGICS
        if not python or "\n" not in source:
            return None
        offset = len(source.split("\n", 1)[0]) + 1
    lines = source[offset:].split("\n")
    masked = [" " * len(line) if line.lstrip().startswith(("%", "!")) else line for line in lines]
    return offset, "\n".join(masked)


def _tokens(text: str) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    return starts


def _comment_text(token: str) -> tuple[str, str, str]:
    """``(prefix, text, suffix)`` of a comment token; ``suffix`` is a kept marker or ''."""
    marker = MARKER_SUFFIX.search(token)
    body, suffix = (token[:marker.start()], token[marker.start():]) if marker else (token, "")
    prefix = PREFIX.match(body)[0]
    return prefix, body[len(prefix):].rstrip(), suffix


def hash_comments(tokens: list[tokenize.TokenInfo], lines: list[str], starts: list[int],
                  everything: bool = False) -> list[Comment]:
    found: list[Comment] = []
    previous_end: dict[int, int] = {}  # row -> column where the code before a comment ends
    block: list[tuple[tokenize.TokenInfo, str, str]] = []

    def close_block() -> None:
        if block:
            first, last = block[0][0], block[-1][0]
            row, col = first.start
            end = starts[last.start[0] - 1] + last.start[1] + len(block[-1][2]) + len(block[-1][1])
            found.append(Comment("block", "\n".join(text for _, _, text in block),
                                 starts[row - 1], end, lines[row - 1][:col], block[0][1],
                                 starts[row - 1], min(starts[last.start[0]], len("\n".join(lines)))))
            block.clear()

    for token in tokens:
        if token.type != tokenize.COMMENT:
            if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                previous_end[token.end[0]] = token.end[1]
            continue
        row, col = token.start
        prefix, text, suffix = _comment_text(token.string)
        wanted = not MARKER.match(token.string) and (everything or translatable(text))
        full_line = not lines[row - 1][:col].strip()
        joins = block and block[-1][0].start == (row - 1, col) and not suffix
        if not (wanted and full_line and joins):
            close_block()
        if not wanted:
            continue
        if full_line:
            block.append((token, prefix, text))
            if suffix:  # a comment ending in a marker: a block of its own, the marker kept
                close_block()
            continue
        start = starts[row - 1] + col
        found.append(Comment("trailing", text, start, start + len(prefix) + len(text), "", prefix,
                             starts[row - 1] + previous_end.get(row, col),
                             start + len(prefix) + len(text)))
    close_block()
    return found


def _docstring_nodes(text: str) -> list[ast.Constant]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    defs = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node.body[0].value for node in ast.walk(tree) if isinstance(node, defs)
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)]


def _margin(body: str) -> str:
    """The indentation common to a docstring's continuation lines (blank lines aside)."""
    indents = [line[:len(line) - len(line.lstrip())] for line in body.split("\n")[1:] if line.strip()]
    return min(indents, key=len) if indents else ""


def _docstrings(text: str, tokens: list[tokenize.TokenInfo], lines: list[str], starts: list[int],
                everything: bool = False) -> list[Comment]:
    by_start = {t.start: t for t in tokens if t.type == tokenize.STRING}
    found = []
    for node in _docstring_nodes(text):
        col = len(lines[node.lineno - 1].encode()[:node.col_offset].decode())
        token = by_start.get((node.lineno, col))
        opening = STRING_START.match(token.string) if token else None
        if token is None or token.end != (node.end_lineno, len(
                lines[node.end_lineno - 1].encode()[:node.end_col_offset].decode())) or not opening:
            continue  # an implicitly concatenated or prefixed (b"", f"") string: left as it is
        docstring = inspect.cleandoc(node.value)
        if not (everything or translatable(docstring)):
            continue
        start, end = starts[node.lineno - 1] + col, starts[token.end[0] - 1] + token.end[1]
        body = token.string[len(opening[0]):-len(opening[2])]
        indent, closing = lines[node.lineno - 1][:col], None
        if col == 0:  # a module's: its text keeps the margin cleandoc took off, its closing quotes their column
            indent, closing = _margin(body), body.rsplit("\n", 1)[-1]
        found.append(Comment(DOCSTRING, docstring, start, end, indent if not indent.strip() else " " * col,
                             opening[0], start, end, closing_line=bool(re.search(r"\n[ \t]*$", body)),
                             closing_indent=closing))
    return found


def comments(source: str, everything: bool = False) -> list[Comment]:
    """The translatable comments of a code cell's source, in order (offsets into ``source``);
    with ``everything``, also those with nothing to translate (Chinese ones, say)."""
    part = python_part(source)
    if part is None:
        return []
    offset, text = part
    tokens = _tokens(text)
    if tokens is None:
        return []
    lines, starts = text.split("\n"), _line_starts(text)
    found = hash_comments(tokens, lines, starts, everything) + \
        _docstrings(text, tokens, lines, starts, everything)
    return sorted((Comment(c.kind, c.text, c.start + offset, c.end + offset, c.indent, c.prefix,
                           c.strip_start + offset, c.strip_end + offset, c.closing_line, c.closing_indent)
                   for c in found), key=lambda c: c.start)


def format_problem(comment: Comment, translation: str) -> str:
    """Why ``translation`` cannot stand in for ``comment`` ('' when it can)."""
    if comment.kind == "trailing" and "\n" in translation:
        return "a comment after code must stay on one line"
    if comment.kind == DOCSTRING:
        quote = STRING_START.match(comment.prefix)[2]
        if "\\" in translation or (quote[0] in translation and len(quote) == 1) or quote in translation \
                or translation.strip().startswith(quote[0]) or translation.strip().endswith(quote[0]):
            return (f"a docstring's translation may hold no backslash and no {quote} "
                    f"(nor start or end with {quote[0]})")
        if len(quote) == 1 and "\n" in translation:
            return "this docstring has single quotes: its translation must be one line"
    return ""


def replacement(comment: Comment, translation: str) -> str:
    """The text that stands in ``source[comment.start:comment.end]`` for ``translation``."""
    lines = translation.strip("\n").split("\n")
    if comment.kind == "block":
        return "\n".join(comment.indent + (comment.prefix + line if line else comment.prefix.rstrip())
                         for line in lines)
    if comment.kind == "trailing":
        return comment.prefix + translation
    quote = STRING_START.match(comment.prefix)[2]
    body = lines[0] + "".join("\n" + (comment.indent + line if line.strip() else "")
                              for line in lines[1:])
    closing = comment.indent if comment.closing_indent is None else comment.closing_indent
    return comment.prefix + body + ("\n" + closing if comment.closing_line else "") + quote


def rewrite(source: str, replace: Callable[[Comment], str | None]) -> str:
    """``source`` with each comment for which ``replace`` returns a translation replaced."""
    for comment in reversed(comments(source)):
        translation = replace(comment)
        if translation and not format_problem(comment, translation):
            source = source[:comment.start] + replacement(comment, translation) + source[comment.end:]
    return source


def without(source: str, found: list[Comment]) -> str:
    """``source`` without the comments ``found`` in it (docstrings become ``...``)."""
    for comment in reversed(found):
        gap = "..." if comment.kind == DOCSTRING else ""
        source = source[:comment.strip_start] + gap + source[comment.strip_end:]
    return source


def strip(source: str) -> str:
    """The code of a cell without its comments, markers kept (docstrings become ``...``)."""
    return without(source, comments(source, everything=True))
