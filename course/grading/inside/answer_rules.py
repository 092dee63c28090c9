"""What an answer cell may hold: imports, ``def``, ``class`` and constants, and nothing that runs.

The answer process (``answer``) runs the answer cells before any check, so an answer
that ran code at the top level would act before the checker has even started; refusing it
keeps every line a student wrote inside the functions the checks call. ``defined_names`` is
what the checker binds to handles: the names an answer defines, read from its syntax, not by
running it.

What the rule allows, precisely: it reads syntax, so it holds for code a class statement runs
through ``type`` (class bodies of definitions and constants, no decorators, keywords or
``__init_subclass__``-style hooks). A base class from a library may still run the new class's
methods while the class is being defined: an ``enum.Enum`` subclass calls its members'
``__new__`` and ``__init__``, and a library base's own ``__init_subclass__`` may call methods of
the subclass. That code runs in the answer's process, before the checker asks anything; it
gains nothing there (the answer could do the same at its first call, and the checks run in
another process), so it is allowed, and this is the one kind of student code that runs at
definition time.
"""

from __future__ import annotations

import ast

#: Longest answer cell parsed (characters): the instructor's longest is a few KB. ``ast.parse``
#: needs ~500 bytes of memory per character of nested code, in the grader: 45 MB would need ~22 GiB.
MAX_ANSWER_CHARS = 100_000

#: Methods whose definition runs code of the class when another class (or a subscript) uses it.
HOOK_METHODS = {"__init_subclass__", "__set_name__", "__mro_entries__", "__class_getitem__"}


def _pure(node: ast.AST, own: set[str]) -> str | None:
    """Why an expression evaluated at definition time would run code, or None if it cannot."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call | ast.Lambda | ast.NamedExpr | ast.Await | ast.Yield
                      | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            return "calls code"
        if isinstance(sub, ast.Subscript) and isinstance(_root(sub.value), ast.Name) \
                and _root(sub.value).id in own:
            return "subscripts a class of this cell"
    return None


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return all(_constant(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _constant(k) for k in node.keys) and all(map(_constant, node.values))
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand)
    if isinstance(node, ast.BinOp):
        return _constant(node.left) and _constant(node.right)
    return False


def _statement_problem(node: ast.stmt, own: set[str], in_class: bool) -> str | None:
    if isinstance(node, ast.Import | ast.ImportFrom | ast.Pass) and not in_class:
        return None
    if isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
        return None
    if isinstance(node, ast.Raise) and not in_class and isinstance(node.exc, ast.Call) \
            and isinstance(node.exc.func, ast.Name) and node.exc.func.id == "NotImplementedError" \
            and all(_constant(a) for a in node.exc.args):
        return None  # the student version's placeholder
    if isinstance(node, ast.Assign) and _constant(node.value) and all(
            isinstance(t, ast.Name) or (isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts))
            for t in node.targets):
        return None
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
            and (node.value is None or _constant(node.value)):
        return _pure(node.annotation, own)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        if in_class and node.name in HOOK_METHODS:
            return f"defines {node.name}, which runs when the class is used"
        args = node.args
        parts = [*node.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None),
                 *(a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                          args.vararg, args.kwarg) if a is not None and a.annotation),
                 *([node.returns] if node.returns else [])]
        return next((why for why in (_pure(p, own) for p in parts) if why), None)
    if isinstance(node, ast.ClassDef):
        if node.keywords or node.decorator_list:
            return "uses class keywords or decorators"
        why = next((w for w in (_pure(b, own) for b in node.bases) if w), None)
        return why or next((w for w in (_statement_problem(s, own, True) for s in node.body) if w), None)
    return "runs code at the top level"


def answer_problems(source: str) -> str | None:
    """Why an answer cell is refused, or None: only imports, def, class and constants may be at top level.

    Decorators, defaults, annotations and class bodies must not call anything either, so
    nothing a student wrote runs until the checks call it.
    """
    if not isinstance(source, str):
        return "the answer cell is not text"
    if len(source) > MAX_ANSWER_CHARS:
        return f"the answer cell has {len(source):,} characters, more than the {MAX_ANSWER_CHARS:,} allowed"
    try:
        tree = ast.parse(source)
        own = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        for node in tree.body:
            why = _statement_problem(node, own, False)
            if why:
                text = (ast.get_source_segment(source, node) or "").splitlines()[0][:80]
                return (f"line {node.lineno} {why} (`{text}`): an answer cell may only hold imports, "
                        "def, class and constant assignments")
    except SyntaxError as error:
        return f"SyntaxError: {error.msg} (line {error.lineno})"
    except (MemoryError, RecursionError, ValueError) as error:  # nested too deeply (or a NUL byte)
        return f"SyntaxError: the answer cell cannot be parsed ({type(error).__name__}: nested too deeply?)"
    return None


def defined_names(source: str) -> list[str]:
    """The top-level names an accepted answer cell defines (functions, classes, constants).

    Imports are left out: they bind modules the checker has already.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, MemoryError, RecursionError, ValueError):
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names += [e.id for e in elts if isinstance(e, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return list(dict.fromkeys(names))
