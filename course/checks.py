"""The student side of the exercises: ``checks`` around the visible checks, ``answered`` for ``...``.

The exercise notebooks import these (``from course.assignments import checks`` works too);
so do their check cells, in the student's kernel, under nbgrader, and inside the grader's
sandbox. Standard library only, so importing it costs nothing anywhere. Messages are shown in
the notebook's language (``course.messages``): a check cell of the Chinese edition fails with
a Chinese message, while its code is the English edition's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from course.messages import message_language, translated


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
