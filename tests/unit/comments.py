"""The comments and docstrings of the repository's code, and the scan for history told in them.

A comment says what holds now and why; how the code got here (a measurement before and after, an
issue's number, what the code did before) belongs in the commit message and docs/figures.md.
Nothing here imports the code it reads; every function takes a root folder, so a test can feed it
a fake tree (``tests/unit/test_comments.py``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

#: Folders of Python code besides the top-level packages (every ``.py`` below them is read).
SCRIPTS = ("data_scripts", ".ci")
#: Files whose ``#`` lines are comments: the Makefile, shell scripts, workflows.
HASH_FILES = ("Makefile", ".ci/run", "chapters/*.sbatch", ".github/workflows/*.yml")

#: What narrates the past, each with its name in a finding.
HISTORY = {
    "an issue's number": re.compile(r"\bissues? #?\d+", re.I),
    "a measurement before -> after": re.compile(
        r"\d[\d.,]*\s*(?:%|s|ms|x|×)?\s*(?:->|→)\s*\d[\d.,]*\s*"
        r"(?:%|s\b|ms\b|x\b|×|seconds\b|minutes\b|min\b|CPU\b|GB\b|MB\b|images/s\b)"),
    "what the code used to do": re.compile(r"(?<!\bis )(?<!\bare )(?<!\bbe )\bused to\b"),
    "previously / formerly / no longer": re.compile(r"\b(previously|formerly|no longer)\b", re.I),
    "a dated figure": re.compile(r"\b20\d\d-[01]\d(-[0-3]\d)?\b"),
    "before this change": re.compile(r"\b(this (change|commit|patch)|until now|as of now)\b", re.I),
    "the old code": re.compile(r"\bthe (old|former|earlier) (checks?|code|version|implementation|tests?)\b",
                               re.I),
    "what changed": re.compile(r"\bnow\b[^.;\n]*\binstead of\b", re.I),
}
#: A word or sign each ``HISTORY`` pattern needs, searched in lower case.
HINTS = re.compile(r"issue|->|→|used to|previously|formerly|no longer|this change|this commit|this patch"
                   r"|until now|as of now|the old|the former|the earlier|instead of|20\d\d-[01]\d")


def chapter_scripts(root: Path) -> list[Path]:
    """The chapters' plain scripts: every ``.py`` under chapters/ that is no notebook's twin."""
    return [path for path in sorted((root / "chapters").rglob("*.py"))
            if not path.with_suffix(".ipynb").exists()]


def python_files(root: Path) -> list[Path]:
    """Every Python file whose comments are read: the top-level packages (a folder with an
    ``__init__.py``), ``SCRIPTS`` and the chapters' scripts."""
    folders = [init.parent for init in sorted(root.glob("*/__init__.py"))] + [root / s for s in SCRIPTS]
    return [path for folder in folders for path in sorted(folder.rglob("*.py"))] + chapter_scripts(root)


def _docstrings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and (text := ast.get_docstring(node, clean=False)) is not None:
            first = node.body[0].lineno
            yield from ((first + i, line) for i, line in enumerate(text.splitlines()))


def python_comments(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of each ``#`` comment and each docstring line of a Python file."""
    source = path.read_text(encoding="utf-8")
    found = [(token.start[0], token.string)
             for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT]
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError:  # the guide's own code, shown as printed (chapters/scripts/02_1)
        return found
    return sorted(found + list(_docstrings(tree)))


def hash_comments(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of each ``#`` comment of a Makefile, shell script or workflow: from the first
    ``#`` that starts the line or follows a space."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if match := re.search(r"(?:^|\s)(#.*)$", line):
            found.append((number, match[1]))
    return found


def scanned(root: Path) -> list[Path]:
    """Every file whose comments are read: Python files, then the ``HASH_FILES``."""
    return python_files(root) + [path for pattern in HASH_FILES for path in sorted(root.glob(pattern))]


def file_comments(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of each comment (and docstring line) of one scanned file."""
    return python_comments(path) if path.suffix == ".py" else hash_comments(path)


def _suspect(text: str) -> bool:
    """A line of ``text`` (comment or not) matches a ``HISTORY`` pattern; found through ``HINTS``, a
    plain search, since the patterns over every line of the repository take seconds."""
    lower = text.lower()
    for hit in HINTS.finditer(lower):
        start, end = lower.rfind("\n", 0, hit.start()) + 1, lower.find("\n", hit.end())
        line = text[start:end if end >= 0 else None]
        if any(pattern.search(line) for pattern in HISTORY.values()):
            return True
    return False


def history(root: Path, allowed: dict[tuple[str, str], str]) -> list[str]:
    """``"file:line: what: text"`` for each comment that narrates the past.

    ``allowed`` maps ``(file, a piece of the line)`` to why that comment must speak of the past.
    Only a file with a suspect line is tokenized (most files have none).
    """
    found = []
    for path in scanned(root):
        file = path.relative_to(root).as_posix()
        if not _suspect(path.read_text(encoding="utf-8")):
            continue
        for number, text in file_comments(path):
            if any(file == where and piece in text for where, piece in allowed):
                continue
            found += [f"{file}:{number}: {what}: {text.strip()}" for what, pattern in HISTORY.items()
                      if pattern.search(text)]
    return found


def stale_allowances(root: Path, allowed: dict[tuple[str, str], str]) -> list[tuple[str, str]]:
    """The entries of ``allowed`` that match no comment: each is removed with its comment."""
    return [(where, piece) for where, piece in allowed
            if not (root / where).is_file()
            or not any(piece in text for _, text in file_comments(root / where))]
