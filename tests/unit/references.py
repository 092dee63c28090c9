"""Who uses which name, read with ``ast``: public definitions nothing uses, private names reached
from another module.

A public function or class that nothing calls or names (no module, test, chapter script or
notebook) is dead code; a ``_name`` is its module's own, so another module that reaches it (an
import, ``module._name``, ``monkeypatch.setattr(module, "_name", ...)``, ``obj._attr`` of a class
defined elsewhere) makes two modules one role cut in two (STYLE.md). Every function takes a root
folder, so ``tests/unit/test_references.py`` can feed it a fake tree; nothing here imports the
code it reads.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

#: Folders of the project's code besides its packages (``code_folders``).
SCRIPTS = ("data_scripts",)
#: ``tests/fixtures`` holds students' submissions, not the project's code.
SKIPPED = ("tests/fixtures",)
#: Pytest finds these by name: tests, test classes, hooks.
PYTEST_NAMES = re.compile(r"^(test_|Test|pytest_|setup_module$|teardown_module$)")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
#: A string that names code: ``name``, ``package.module.name`` or ``package.module:name``.
CODE_PATH = re.compile(r"[A-Za-z_][\w.]*(:\w+)?")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def code_folders(root: Path) -> list[str]:
    """The folders of the project's modules, as the tree has them: every top-level package (a folder
    with an ``__init__.py``: ``common``, ``course``, ``tests``, and any added) and ``SCRIPTS``."""
    packages = [init.parent.name for init in sorted(root.glob("*/__init__.py"))]
    return packages + [folder for folder in SCRIPTS if (root / folder).is_dir()]


def project_modules(root: Path) -> dict[str, Path]:
    """The project's modules under ``code_folders`` (``SKIPPED`` left out), by dotted name: their
    public definitions must be used, their private names stay home."""
    return {module_name(root, path): path for folder in code_folders(root)
            for path in sorted((root / folder).rglob("*.py"))
            if not any(path.relative_to(root).as_posix().startswith(f"{s}/") for s in SKIPPED)}


@functools.cache
def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _private(name: str) -> bool:
    """``_name`` or ``__name``; not ``__dunder__`` nor ``_sunder_`` (IPython's ``_repr_html_``)."""
    return name.startswith("_") and not name.endswith("_")


@dataclass
class Reading:
    """What one module uses and defines, from one walk over its tree."""

    #: Each name used, counted: names, attributes, imports, and strings that name code.
    used: Counter = field(default_factory=Counter)
    #: The public top-level functions and classes, and how often each names itself in its body.
    defs: dict[str, ast.AST] = field(default_factory=dict)
    own: Counter = field(default_factory=Counter)
    #: Every parameter name (how a test asks for a fixture).
    parameters: set[str] = field(default_factory=set)
    #: The private names the module defines: functions, classes, assignments, attributes set.
    private: set[str] = field(default_factory=set)
    #: ``(line, node)`` of each ``x._name``, import of a ``_name``, ``setattr(x, "_name")`` and
    #: ``"pkg.mod._name"`` string: the candidates of a private reach.
    reaches: list[tuple[int, ast.AST]] = field(default_factory=list)
    #: Every import statement, at any depth: which local names are the project's modules.
    imports: list[ast.Import | ast.ImportFrom] = field(default_factory=list)


def _docstring(node: ast.AST) -> ast.AST | None:
    body = getattr(node, "body", None)
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
            and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[0].value
    return None


def _exports(statement: ast.AST) -> bool:
    """``__all__ = [...]`` or a lazy facade's ``_WHERE = {...}``: the definitions' own listing, not a use."""
    return isinstance(statement, ast.Assign) and [ast.unparse(t) for t in statement.targets] in (
        ["__all__"], ["_WHERE"])


def _note(reading: Reading, node: ast.AST, skipped: set[int]) -> None:
    """Record what one node uses, defines or reaches."""
    if isinstance(node, ast.Name):
        reading.used[node.id] += 1
        if isinstance(node.ctx, ast.Store) and _private(node.id):
            reading.private.add(node.id)
    elif isinstance(node, ast.Attribute):
        reading.used[node.attr] += 1
        if _private(node.attr):
            (reading.private.add(node.attr) if isinstance(node.ctx, ast.Store)
             else reading.reaches.append((node.lineno, node)))
    elif isinstance(node, ast.alias):
        reading.used[node.name.rpartition(".")[2]] += 1
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        reading.imports.append(node)
        if isinstance(node, ast.ImportFrom) and any(_private(a.name) for a in node.names):
            reading.reaches.append((node.lineno, node))
    elif isinstance(node, ast.arg):
        reading.parameters.add(node.arg)
        if _private(node.arg):
            reading.private.add(node.arg)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
        reading.private.add(node.name)
    elif isinstance(node, ast.Call) and _names_a_private(node):
        reading.reaches.append((node.lineno, node))
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped \
            and CODE_PATH.fullmatch(node.value):
        reading.used.update(IDENTIFIER.findall(node.value))
        if any(_private(part) for part in re.split(r"[.:]", node.value)[1:]):
            reading.reaches.append((node.lineno, node))


def _names_a_private(call: ast.Call) -> bool:
    """``getattr(x, "_name")``, ``setattr``, ``hasattr``, ``delattr``, ``monkeypatch.setattr(x, "_name", v)``."""
    function = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    return function in ("getattr", "setattr", "hasattr", "delattr") and len(call.args) >= 2 \
        and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str) \
        and _private(call.args[1].value)


@functools.cache
def read(path: Path) -> Reading:
    """One walk over the module at ``path``."""
    tree = parse(path)
    reading = Reading()
    skipped = {id(doc)} if (doc := _docstring(tree)) else set()
    for statement in tree.body:
        name = getattr(statement, "name", "")  # a function or class: its uses inside itself are its own
        before, exports = reading.used[name], _exports(statement)
        for node in ast.walk(statement):
            if (doc := _docstring(node)) is not None:
                skipped.add(id(doc))
            if not (exports and isinstance(node, ast.Constant)):
                _note(reading, node, skipped)
        if name and not name.startswith("_"):
            reading.defs[name] = statement
            reading.own[name] = reading.used[name] - before
    return reading


def _code_names(code: str) -> Counter[str]:
    """Every identifier of code outside its ``#`` lines: a notebook's cells (magics and shell lines
    make some not Python) and the chapters' scripts, read as text (parsing them costs a second)."""
    return Counter(IDENTIFIER.findall("\n".join(line for line in code.splitlines()
                                                if not line.lstrip().startswith("#"))))


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


@functools.cache
def all_uses(root: Path) -> Counter[str]:
    """The names used anywhere: the project's modules, the chapters' notebooks and scripts, the
    tools' scripts (``.ci/``, ``docs/conf.py``) and ``pyproject.toml``'s entry points."""
    used: Counter[str] = Counter()
    for path in [*project_modules(root).values(), *sorted(root.glob(".ci/*.py")), *sorted(root.glob("docs/*.py"))]:
        used += read(path).used
    for path in sorted((root / "chapters").rglob("*.py")):
        used += _code_names(path.read_text(encoding="utf-8"))
    for path in sorted((root / "chapters").rglob("*.ipynb")):
        used += _code_names(_notebook_code(path))
    pyproject = root / "pyproject.toml"
    used.update(IDENTIFIER.findall(pyproject.read_text()) if pyproject.is_file() else [])
    return used


def _fixture(node: ast.AST) -> str:
    """``"fixture"`` or ``"autouse"`` for a pytest fixture, else ``""``."""
    for decorator in getattr(node, "decorator_list", []):
        text = ast.unparse(decorator)
        if "fixture" in text:
            return "autouse" if "autouse=True" in text else "fixture"
    return ""


def dead(root: Path, allowed: dict[str, str]) -> list[str]:
    """``"module.name"`` of each public top-level function or class of the project that nothing
    uses but itself; ``allowed`` maps such names to why they stay.

    Uses are matched by name alone: a use of the same name anywhere keeps a definition (the scan
    may miss dead code, never call live code dead).
    """
    modules, used = project_modules(root), all_uses(root)
    parameters = set().union(*(read(path).parameters for name, path in modules.items()
                               if name.split(".")[0] == "tests"))
    found = []
    for module, path in modules.items():
        reading = read(path)
        for name, node in reading.defs.items():
            if PYTEST_NAMES.match(name) or f"{module}.{name}" in allowed:
                continue
            if (kind := _fixture(node)) and (kind == "autouse" or name in parameters):
                continue
            if used[name] - reading.own[name] <= 0:
                found.append(f"{module}.{name}")
    return sorted(found)


def _module_aliases(reading: Reading, modules: set[str]) -> dict[str, str]:
    """Local name -> the project module it is: ``import a.b as m``, ``from a import b`` (a module),
    ``import a.b`` (``a``, a package)."""
    aliases = {}
    for node in reading.imports:
        for alias in node.names:
            if isinstance(node, ast.Import):
                name = alias.name if alias.asname else alias.name.split(".")[0]
                local = alias.asname or name
            elif node.level == 0:
                name, local = f"{node.module}.{alias.name}", alias.asname or alias.name
            else:
                continue
            if name in modules:
                aliases[local] = name
    return aliases


def _module_of(node: ast.AST, aliases: dict[str, str], modules: set[str]) -> str | None:
    """The project module an expression such as ``trainer`` or ``common.ddp.trainer`` names, or None."""
    first, dot, rest = ast.unparse(node).partition(".")
    name = aliases.get(first, first) + dot + rest
    return name if name in modules else None


def _reach(node: ast.AST, here: str, aliases: dict[str, str], modules: set[str],
           owners: dict[str, set[str]]) -> str:
    """What private name of another module ``node`` reaches, in words; ``""`` if none."""
    if isinstance(node, ast.ImportFrom):
        package = node.module or ""
        if node.level or package.split(".")[0] in {m.split(".")[0] for m in modules}:
            names = [a.name for a in node.names if _private(a.name)]
            return f"imports {', '.join(names)} from {'.' * node.level}{package}"
        return ""
    if isinstance(node, ast.Constant):
        parts = re.split(r"[.:]", node.value)
        for cut in range(len(parts) - 1, 0, -1):
            if ".".join(parts[:cut]) in modules and _private(parts[cut]):
                return f"names {node.value!r}" if ".".join(parts[:cut]) != here else ""
        return ""
    target, name = (node.value, node.attr) if isinstance(node, ast.Attribute) else (node.args[0], node.args[1].value)
    if (module := _module_of(target, aliases, modules)) is not None:
        return f"{ast.unparse(target)}.{name} ({module})" if module != here else ""
    elsewhere = sorted(owners.get(name, set()) - {here})
    if elsewhere and here not in owners.get(name, set()):
        return f"{ast.unparse(target)}.{name} (a private name of {', '.join(elsewhere)})"
    return ""


def private_reaches(root: Path, allowed: dict[tuple[str, str], str]) -> list[str]:
    """``"file:line: what"`` for each private name of a project module that another module reaches:
    an import of it, ``module._name`` (also through ``getattr``/``setattr``/``monkeypatch.setattr``
    or a ``"pkg.module._name"`` string), or ``obj._attr`` where ``_attr`` is set or defined in
    another module only. ``allowed`` maps ``(file, what)`` to why it may."""
    modules = project_modules(root)
    names = set(modules)
    owners: dict[str, set[str]] = {}
    for module, path in modules.items():
        for name in read(path).private:
            owners.setdefault(name, set()).add(module)
    found = []
    for module, path in modules.items():
        reading, file = read(path), path.relative_to(root).as_posix()
        aliases = _module_aliases(reading, names)
        for line, node in reading.reaches:
            if (what := _reach(node, module, aliases, names, owners)) and (file, what) not in allowed:
                found.append(f"{file}:{line}: {what}")
    return found
