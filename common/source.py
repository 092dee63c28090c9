"""Show code in a notebook: a function's source, or the change between two scripts, highlighted.

Chapters use it to open the ``common`` code they run (``show_source(train_one_epoch)``) and to
show a script's diff against the version before (``show_diff(single, ddp)``). The objects it
returns display as highlighted HTML in Jupyter and as plain text everywhere else (a terminal,
a code host that shows only the text of a stored output).
"""

from __future__ import annotations

import difflib
import inspect
import textwrap
from dataclasses import dataclass

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

from common.paths import display_path


@dataclass(frozen=True)
class Code:
    """Source text that displays highlighted in Jupyter and plain in ``repr``.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """

    text: str
    title: str = ""
    language: str = "python"

    def __repr__(self) -> str:
        return (f"# {self.title}\n" if self.title else "") + self.text

    def _repr_html_(self) -> str:
        lexer = DiffLexer() if self.language == "diff" else PythonLexer()
        body = highlight(self.text, lexer, HtmlFormatter(noclasses=True, style="default"))
        caption = f"<div><code>{self.title}</code></div>" if self.title else ""
        return caption + body


def show_source(obj: object) -> Code:
    """The source of a function, class or module, titled with its file and first line.

    Args:
        obj: Anything ``inspect.getsource`` accepts (``common.ddp.train.build_loaders``).

    Returns:
        A :class:`Code` (the last expression of a cell displays it).

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    lines, first = inspect.getsourcelines(obj)
    where = f"{display_path(inspect.getsourcefile(obj))}, line {max(first, 1)}"
    return Code(textwrap.dedent("".join(lines)), title=where)


def show_diff(before: str, after: str, *, before_name: str = "before",
              after_name: str = "after", context: int = 1) -> Code:
    """A unified diff of two texts (two versions of a script), highlighted.

    Returns:
        A :class:`Code` whose text is the diff; ``Code.text.count("\\n+")`` counts added lines.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    diff = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                before_name, after_name, n=context)
    return Code("".join(diff), title=f"{before_name} -> {after_name}", language="diff")


def changed_lines(before: str, after: str) -> tuple[int, int]:
    """(lines removed, lines added) between two texts.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    ops = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return sum(op.startswith("- ") for op in ops), sum(op.startswith("+ ") for op in ops)
