"""The student side of the exercises: ``checks`` around the visible checks, ``answered`` for ``...``,
``hints`` for the stepped hints of each exercise.

The exercise notebooks import these (``from course.student.checks import checks, hints``);
so do their check cells, in the student's kernel, under nbgrader, and inside the grader's
sandbox. Standard library only, so importing it costs nothing anywhere. Messages are shown in
the notebook's language (``course.student.messages``): a check cell of the Chinese edition fails with
a Chinese message, while its code is the English edition's.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from course.student.messages import message_language, translated


@contextmanager
def checks(name: str) -> Iterator[None]:
    """Run an exercise's visible checks; report ``NotImplementedError`` as "not yet done".

    Failed asserts propagate, so a wrong answer shows its message (translated in place into the
    notebook's language, keeping the traceback). Only the visible checks go inside; hidden checks
    come after the ``with`` block. Under nbgrader (``nbgrader validate``/``autograde`` set
    ``NBGRADER_EXECUTION``) the error propagates, so that unanswered work fails validation
    instead of passing it.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    language = message_language()
    try:
        yield
    except (AssertionError, NotImplementedError) as error:
        if error.args and isinstance(error.args[0], str):
            error.args = (translated(error.args[0], language), *error.args[1:])
        if isinstance(error, AssertionError) or os.environ.get("NBGRADER_EXECUTION"):
            raise
        detail = f" ({error})" if str(error) else ""
        print(translated(f"{name}: not yet done{detail}. Write your answer in the cell above, "
                         "run it, then run this cell again.", language))
        return
    print(translated(f"{name}: visible checks passed.", language))


def answered(*values: object) -> None:
    """Raise ``NotImplementedError`` if any value is still the ``...`` placeholder."""
    if any(value is Ellipsis for value in values):
        raise NotImplementedError("replace each `...` placeholder with your answer")


#: The hints of every exercise notebook: ``{stem: {"ex2": {"en": [nudge, ..., near-answer], "zh-CN": [...]}}}``.
HINTS = Path(__file__).resolve().parents[2] / "chapters" / "exercises" / "hints.json"


def hint_texts(stem: str, key: str, language: str) -> list[str]:
    """The hints of exercise ``key`` of the notebook ``stem`` in ``language`` (English where a hint has
    no translation); empty if it has none."""
    try:
        table = json.loads(HINTS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    entry = table.get(stem, {}).get(key, {}) if isinstance(table, dict) else {}
    english = entry.get("en", []) if isinstance(entry, dict) else []
    chosen = entry.get(language, []) if isinstance(entry, dict) else []
    return [chosen[i] if i < len(chosen) and chosen[i] else text for i, text in enumerate(english)]


def hints(stem: str) -> Callable[[str, int], None]:
    """The ``hint`` function of one exercise notebook (its first cell binds ``hint = hints("ex04_...")``).

    ``hint("ex2", 1)`` prints the first hint of Exercise 2 (a nudge), ``hint("ex2", 2)`` the next (closer
    to the answer), one at a time: call it in a cell of your own. Grading records how many hints each
    exercise's cells opened (the highest level of a ``hint`` cell that ran); it changes no score unless the
    instructor grades with ``--hint-cost``.
    """

    def hint(key: str, level: int) -> None:
        language = message_language()
        texts = hint_texts(stem, str(key), language)
        number = re.sub(r"\D", "", str(key))
        if not texts:
            print(translated(f"Exercise {number} has no hints.", language))
            return
        if not isinstance(level, int) or not 1 <= level <= len(texts):
            print(translated(f"Exercise {number} has hints 1 to {len(texts)}.", language))
            return
        print(translated(f"Exercise {number}, hint {level} of {len(texts)}:", language))
        print(texts[level - 1])
        if level < len(texts):
            print(translated(f"Still stuck? hint(\"{key}\", {level + 1}) comes closer to the answer.", language))

    return hint
