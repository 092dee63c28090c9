"""Show code in a notebook: a function's source, a script file, or the change between two scripts, highlighted.

Chapters use it to open the ``common`` code they run (``show_source(train_one_epoch)``), to show a
script they run (``show_file("scripts/04_1/single.py")``) and its diff against the version before
(``show_diff("scripts/04_1/single.py", "scripts/04_1/ddp_step1.py")``). The objects it
returns display as highlighted HTML in Jupyter and as plain text everywhere else (a terminal,
a code host that shows only the text of a stored output).
"""

from __future__ import annotations

import difflib
import inspect
import textwrap
from dataclasses import dataclass
from pathlib import Path

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


def show_file(path: str | Path) -> Code:
    """A script file, titled with its path as given (relative to the notebook: ``scripts/04_1/ddp.py``).

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    return Code(Path(path).read_text(encoding="utf-8"), title=Path(path).as_posix())


def show_diff(before: str | Path, after: str | Path, *, before_name: str | None = None,
              after_name: str | None = None, context: int = 1) -> Code:
    """A unified diff of two versions of a script, highlighted: two files (``Path`` or a path
    ending in ``.py``, named by their file names) or two texts.

    Returns:
        A :class:`Code` whose text is the diff; ``Code.text.count("\\n+")`` counts added lines.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    before, before_name = _text_and_name(before, before_name, "before")
    after, after_name = _text_and_name(after, after_name, "after")
    diff = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                before_name, after_name, n=context)
    return Code("".join(diff), title=f"{before_name} -> {after_name}", language="diff")


def _text_and_name(code: str | Path, name: str | None, default: str) -> tuple[str, str]:
    """A file's text and name (a ``Path``, or a string naming a ``.py`` file), or a text and ``name``."""
    if isinstance(code, Path) or (code.endswith(".py") and "\n" not in code):
        return Path(code).read_text(encoding="utf-8"), name or Path(code).name
    return code, name or default


def changed_lines(before: str | Path, after: str | Path) -> tuple[int, int]:
    """(lines removed, lines added) between two texts or two files.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    before, after = _text_and_name(before, None, "")[0], _text_and_name(after, None, "")[0]
    ops = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return sum(op.startswith("- ") for op in ops), sum(op.startswith("+ ") for op in ops)
