"""Demo cells of an instructor source: code cells tagged ``demo`` that only show the learner
something (a broken script failing, the way a check will run an answer). The grader does not run
them (``course.grading.submission``), so ``check_demo`` refuses a source in which a later cell uses
a name a demo cell binds: skipping it must change nothing the checks see.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

#: The tag of a demo cell.
DEMO_TAG = "demo"


class DemoCellError(ValueError):
    """A demo cell that the grader could not skip safely; the message names notebook and cell."""


def is_demo(cell: nbformat.NotebookNode) -> bool:
    """Whether the cell is tagged ``demo`` (shown to the learner, never run by the grader)."""
    return DEMO_TAG in cell.get("metadata", {}).get("tags", [])


def _tree(source: str) -> ast.Module | None:
    """The cell's code without IPython's ``%``/``!`` lines (None if the rest does not parse)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _bound(tree: ast.Module) -> set[str]:
    """The names a cell binds at its top level (assignments, loops, imports, def and class)."""
    names, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue  # what a body binds is local to it
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        todo += ast.iter_child_nodes(node)
    return names


def _free(nodes: list[ast.AST], local: frozenset[str] = frozenset()) -> set[str]:
    """The names code reads that it may take from earlier cells: a function's own arguments and
    assignments are local to it."""
    used: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            body = node.body if isinstance(node.body, list) else [node.body]
            a = node.args
            own = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x}
            own |= {n.id for b in body for n in ast.walk(b) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            used |= _free(body, local | own)
            used |= _free([*getattr(node, "decorator_list", []), *a.defaults, *filter(None, a.kw_defaults)], local)
        elif isinstance(node, ast.Name):
            used |= {node.id} if isinstance(node.ctx, ast.Load) and node.id not in local else set()
        else:
            used |= _free([n for n in ast.iter_child_nodes(node) if n is not None], local)
    return used


def check_demo(nb: nbformat.NotebookNode, index: int, name: str) -> None:
    """A demo cell is an ordinary code cell whose names no later cell uses (the grader skips it)."""
    cell, where = nb.cells[index], f"{name} cell {index}"
    tree = _tree(cell.source) if cell.cell_type == "code" else None
    if cell.get("metadata", {}).get("nbgrader") or tree is None:
        raise DemoCellError(f"{where}: a '{DEMO_TAG}' cell is a plain code cell that parses "
                                    "(not an answer or check cell)")
    bound = _bound(tree)
    for later, other in enumerate(nb.cells[index + 1:], start=index + 1):
        if other.cell_type != "code" or is_demo(other) or (body := _tree(other.source)) is None:
            continue
        used = bound & _free(body.body)
        if used:
            raise DemoCellError(f"{where}: cell {later} uses {', '.join(sorted(used))}, which "
                                        f"this '{DEMO_TAG}' cell binds; the grader does not run it")
