"""The check and feedback messages of the exercises in the student's language.

The exercises' code is the same in every edition (``chapters/zh/exercises`` differs from
``chapters/exercises`` only in markdown and comments), so their messages are written in English
and translated when shown: ``course.student.checks`` translates a failed visible check in the student's
kernel, the grader each feedback notebook. A catalogue (``course/student/messages_<language>.json``)
maps each English message to its translation. A key is the message as written, with ``{}`` for
each value of an f-string (``f"expected shape {tuple(x.shape)}"`` is ``"expected shape {}"``);
its translation numbers them (``{0}``, ``{1}``) and may reorder them. The values are translated
too where they are messages themselves (``check failed: {}``). ``message_keys`` lists the keys a
piece of check code uses, so a test can hold every catalogue complete.

Standard library only: the student's kernel and the grader's sandbox import this through
``course.student.checks``.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import sys
from pathlib import Path

ENGLISH = "en"
#: The Chinese edition's language, which ``course.publishing.translate`` writes into its notebooks.
CHINESE = "zh-CN"
LANGUAGES = (ENGLISH, CHINESE)
#: Set to a language to choose it whatever the notebook says (a terminal, a test).
LANGUAGE_VARIABLE = "COURSE_LANGUAGE"
#: How deep values that are messages themselves are translated.
_DEPTH = 4
_ERROR_PREFIX = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception)): (.*)", re.DOTALL)


def notebook_language(metadata: object) -> str:
    """The language of a notebook from its metadata (``translation.language``, written by
    ``course.publishing.translate``); English for anything else, since a submission's metadata is the
    student's to change."""
    translation = metadata.get("translation") if isinstance(metadata, dict) else None
    language = translation.get("language") if isinstance(translation, dict) else None
    return language if language in LANGUAGES else ENGLISH


def _notebook_path() -> Path | None:
    """The notebook this kernel runs, where the front end says: JupyterLab/Notebook put its path
    in ``JPY_SESSION_NAME`` (relative to the server's folder, while the kernel starts in the
    notebook's), VS Code in the kernel's ``__vsc_ipynb_file__``."""
    name = os.environ.get("JPY_SESSION_NAME", "")
    if not name and "IPython" in sys.modules:
        shell = sys.modules["IPython"].get_ipython()
        name = str(shell.user_ns.get("__vsc_ipynb_file__", "")) if shell is not None else ""
    if not name.endswith(".ipynb"):
        return None
    path = Path(name)
    return path if path.is_file() or not (Path.cwd() / path.name).is_file() else Path.cwd() / path.name


def _in_chinese_edition(path: Path) -> bool:
    parts = path.resolve().parts
    return any(parts[i:i + 2] == ("chapters", "zh") for i in range(len(parts)))


def message_language() -> str:
    """The language the running notebook's messages are shown in: ``COURSE_LANGUAGE`` if set, else
    the notebook's metadata (or its place under ``chapters/zh``), else the working folder's
    place (a kernel starts in its notebook's folder); English otherwise.

    Raises:
        ValueError: ``COURSE_LANGUAGE`` names a language without a catalogue.
    """
    chosen = os.environ.get(LANGUAGE_VARIABLE)
    if chosen:
        if chosen not in LANGUAGES:
            raise ValueError(f"{LANGUAGE_VARIABLE}={chosen!r}: use one of {', '.join(LANGUAGES)}")
        return chosen
    path = _notebook_path()
    if path is None:
        return CHINESE if _in_chinese_edition(Path.cwd()) else ENGLISH
    try:
        language = notebook_language(json.loads(path.read_text(encoding="utf-8")).get("metadata"))
    except (OSError, ValueError, AttributeError):
        language = ENGLISH
    return CHINESE if language == ENGLISH and _in_chinese_edition(path) else language


def catalogue_path(language: str) -> Path:
    """``course/student/messages_<language>.json`` (``zh-CN`` is ``messages_zh.json``)."""
    return Path(__file__).with_name(f"messages_{language.split('-')[0]}.json")


def _no_duplicates(pairs: list[tuple[str, str]]) -> dict[str, str]:
    keys = [key for key, _ in pairs]
    doubled = sorted({key for key in keys if keys.count(key) > 1})
    if doubled:
        raise ValueError(f"the message catalogue lists {doubled} more than once")
    return dict(pairs)


@functools.cache
def catalogue(language: str) -> dict[str, str]:
    """English message (``{}`` for a value) -> its translation; empty for English.

    Raises:
        ValueError: The language has no catalogue, or the catalogue names a key twice.
    """
    if language == ENGLISH:
        return {}
    if language not in LANGUAGES:
        raise ValueError(f"no message catalogue for language {language!r}: use one of {', '.join(LANGUAGES)}")
    path = catalogue_path(language)
    try:
        return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicates)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def _values(key: str, message: str) -> list[str] | None:
    """The values that make ``key`` into ``message``, or None if it does not fit.

    Each literal piece is found leftmost in turn (no regular expression, so a long message built
    from an answer's values cannot make the matching slow).
    """
    if "{}" not in key:
        return [] if key == message else None
    first, *middle, last = key.split("{}")
    if len(message) < len(first) + len(last) or not message.startswith(first) or not message.endswith(last):
        return None
    position, end, values = len(first), len(message) - len(last), []
    for piece in middle:
        found = message.find(piece, position, end)
        if found < 0:
            return None
        values.append(message[position:found])
        position = found + len(piece)
    return [*values, message[position:end]]


def translated(message: str, language: str, _depth: int = 0) -> str:
    """``message`` in ``language``: the catalogue entry whose key fits it best (the most literal
    text), its values translated in turn; an ``XError: message`` keeps the error's name. A
    message the catalogue does not know stays as it is."""
    table = catalogue(language)
    if not table or _depth > _DEPTH:
        return message
    if message in table:
        return table[message]
    fits = [(len(key) - 2 * key.count("{}"), key, values) for key in table
            if "{}" in key and (values := _values(key, message)) is not None]
    if fits:
        _, key, values = max(fits)
        return table[key].format(*(translated(v, language, _depth + 1) for v in values))
    prefixed = _ERROR_PREFIX.fullmatch(message)
    if prefixed:
        return f"{prefixed[1]}: {translated(prefixed[2], language, _depth + 1)}"
    return message


def _key(node: ast.expr | None) -> str | None:
    """The catalogue key of a message expression: a string, or an f-string with ``{}`` for each
    value; None for anything else (a message that is a value, not text)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def message_keys(code: str) -> set[str]:
    """The keys of every message ``code`` can fail with: each ``assert``'s message, and the first
    argument of each ``raise AssertionError(...)`` or ``raise NotImplementedError(...)``."""
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Assert):
            found.add(_key(node.msg))
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args \
                and isinstance(node.exc.func, ast.Name) \
                and node.exc.func.id in ("AssertionError", "NotImplementedError"):
            found.add(_key(node.exc.args[0]))
    return {key for key in found if key}
