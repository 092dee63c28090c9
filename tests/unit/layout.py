"""The repository's modules read with ``ast``: imports, entry points, public functions, facades.

Nothing here imports the code it reads, so ``tests/unit/test_layout.py`` checks the layout of
ARCHITECTURE.md without torch; every check takes a root folder, so a test can feed it a fake tree.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

#: Where the repository's Python modules live (chapters are notebooks, not modules).
SCANNED = ("common", "course", "data_scripts", "tests")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_files(root: Path, folders: tuple[str, ...] = SCANNED) -> dict[str, Path]:
    """Every module under ``folders`` of ``root``, by dotted name."""
    return {module_name(root, path): path for folder in folders
            for path in sorted((root / folder).rglob("*.py"))}


@functools.cache
def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _top_level(tree: ast.Module) -> Iterator[ast.AST]:
    """The statements that run when the module is imported: everything but function bodies."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for name in ("body", "orelse", "finalbody", "handlers"):
            stack.extend(getattr(node, name, []))


def _named(node: ast.AST, modules: dict[str, Path]) -> set[str]:
    """What one import statement imports: ``from a import b`` is ``a.b`` where that is a module."""
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names}
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    return set()


def imports(path: Path, modules: dict[str, Path], *, top_level: bool) -> set[str]:
    """The modules ``path`` imports: at import time only (``top_level``), or at any depth."""
    tree = parse(path)
    nodes = _top_level(tree) if top_level else ast.walk(tree)
    return set().union(*(_named(node, modules) for node in nodes))


def import_graph(modules: dict[str, Path], *, top_level: bool) -> dict[str, set[str]]:
    """Each module and the modules of ``modules`` it imports."""
    return {name: {m for m in imports(path, modules, top_level=top_level)
                   if m in modules and m != name}
            for name, path in modules.items()}


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (a list of modules, the first again at the end), or []."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = "done"
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return []


def console_script_targets(pyproject: Path) -> dict[str, str]:
    """``[project.scripts]`` of ``pyproject``: command name -> ``module:function``."""
    text = pyproject.read_text() if pyproject.is_file() else ""
    section = re.search(r"^\[project\.scripts\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    return dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.]+:\w+)"', section[1] if section else "", re.M))


def console_scripts(pyproject: Path) -> set[str]:
    """The modules of ``[project.scripts]`` (``name = "module:function"``) in ``pyproject``."""
    return {target.split(":")[0] for target in console_script_targets(pyproject).values()}


def has_main_guard(path: Path) -> bool:
    """The module runs as a program: a top-level ``if __name__ == "__main__":``."""
    return any(_is_main_guard(node) for node in parse(path).body)


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``"""
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare)
            and {ast.unparse(test.left), ast.unparse(test.comparators[0])}
            == {"__name__", "'__main__'"})


def entry_points(root: Path, modules: dict[str, Path]) -> set[str]:
    """Modules run as programs: a ``__main__`` guard, a ``__main__.py``, or a console script."""
    scripts = console_scripts(root / "pyproject.toml")
    return {name for name, path in modules.items()
            if path.name == "__main__.py" or name in scripts
            or has_main_guard(path)}


def lazy_map(path: Path) -> dict[str, str]:
    """A facade's ``_WHERE = {name: module}`` (``common.lazy.lazy_names``), or {}."""
    for node in parse(path).body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["_WHERE"]:
            return ast.literal_eval(node.value)
    return {}


def entry_point_imports(root: Path, modules: dict[str, Path], scope: str) -> list[str]:
    """``"a imports b"`` for each module of ``scope`` that imports an entry point ``b``.

    At any depth (an import inside a function still loads the program), lazy facades included.
    """
    entries = entry_points(root, modules)
    found = []
    for name, path in modules.items():
        if name == scope or name.startswith(f"{scope}."):
            used = imports(path, modules, top_level=False) | set(lazy_map(path).values())
            found += [f"{name} imports {entry}" for entry in sorted(used & entries - {name})]
    return sorted(found)


def defined_names(path: Path) -> set[str]:
    """Names a module defines itself (not those it imports): functions, classes, assignments."""
    names = set()
    for node in parse(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    args = node.args
    return (*(a.arg for a in args.posonlyargs + args.args), "*", *(a.arg for a in args.kwonlyargs))


def shared_function_names(root: Path, modules: dict[str, Path]) -> list[str]:
    """Public functions of the library modules (not entry points) that share a name but not
    their parameters: ``"name: a.f(x, *), b.f(y, *)"``."""
    entries = entry_points(root, modules)
    found: dict[str, dict[str, tuple[str, ...]]] = {}
    for name, path in modules.items():
        if name in entries:
            continue
        for node in parse(path).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and not node.name.startswith("_"):
                found.setdefault(node.name, {})[name] = _parameters(node)
    return [f"{function}: " + ", ".join(f"{m}({', '.join(p)})" for m, p in sorted(where.items()))
            for function, where in sorted(found.items()) if len(set(where.values())) > 1]


def facade_problems(root: Path, modules: dict[str, Path]) -> list[str]:
    """What is wrong with each lazy facade: a name must live in a module (a file, not a
    subpackage) of the facade's own package, be defined there, and not be in an entry point."""
    entries, problems = entry_points(root, modules), []
    for package, path in modules.items():
        for name, target in sorted(lazy_map(path).items()):
            where = modules.get(target)
            if target.rpartition(".")[0] != package or where is None or where.name == "__init__.py":
                problems.append(f"{package}.{name} -> {target}: not a module of {package}")
            elif target in entries:
                problems.append(f"{package}.{name} -> {target}: an entry point")
            elif name not in defined_names(where):
                problems.append(f"{package}.{name} -> {target}: not defined there")
    return problems


def external_closure(module: str, modules: dict[str, Path]) -> set[str]:
    """The third-party top-level packages that importing ``module`` imports (import time only)."""
    seen, stack, external = set(), [module], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        stack += [parent for parent in parents if parent in modules]  # run first by Python
        for imported in imports(modules[name], modules, top_level=True):
            if imported in modules:
                stack.append(imported)
            elif imported.split(".")[0] not in {m.split(".")[0] for m in modules}:
                external.add(imported.split(".")[0])
    return external


def imports_beyond(modules: dict[str, Path], scope: str, allowed: tuple[str, ...], *,
                   package: str) -> list[str]:
    """``"a imports b"`` for each module of ``scope`` that imports, at any depth (``TYPE_CHECKING``
    and function bodies too), a module of ``package`` outside the ``allowed`` packages; the packages
    above ``scope`` (run first by Python, whatever imports it) are allowed."""
    def inside(name: str, prefixes: tuple[str, ...]) -> bool:
        return any(name == p or name.startswith(f"{p}.") for p in prefixes)

    parents = {".".join(scope.split(".")[:i]) for i in range(1, scope.count(".") + 1)}
    found = []
    for name, path in modules.items():
        if inside(name, (scope,)):
            used = {m for m in imports(path, modules, top_level=False) if m in modules}
            found += [f"{name} imports {m}" for m in sorted(used)
                      if inside(m, (package,)) and not inside(m, allowed) and m not in parents]
    return sorted(found)


def constant(path: Path, name: str) -> object:
    """The literal a module assigns to ``name`` at its top level (``EXPOSED = (...)``), read with ast."""
    for node in parse(path).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) else []
        if [ast.unparse(t) for t in targets] == [name]:
            return ast.literal_eval(node.value)
    raise LookupError(f"{path}: no top-level {name} = ...")


def shown_modules(root: Path, modules: dict[str, Path], shown: tuple[str, ...]) -> set[str]:
    """The modules of ``modules`` whose files lie in ``shown`` (paths relative to ``root``: a file
    or a folder, as the grader's sandbox shows them)."""
    places = [root / p for p in shown]
    return {name for name, path in modules.items()
            if any(path == place or path.is_relative_to(place) for place in places if place.is_dir()
                   or place.suffix == ".py")}


def unshown_imports(root: Path, modules: dict[str, Path], shown: tuple[str, ...]) -> list[str]:
    """``"a imports b"`` for each shown module that imports, at any depth, a module of ``modules``
    that is not shown (it would fail in the sandbox, or the sandbox would have to show tooling)."""
    visible = shown_modules(root, modules, shown)
    found = set()
    for name in visible:
        parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}  # run first
        found |= {f"{name} imports {m}" for m in imports(modules[name], modules, top_level=False) | parents
                  if m in modules and m not in visible}
    return sorted(found)


def part_of(root: Path, package: str, path: Path) -> str:
    """The part of ``package`` a module is in: its subpackage (``ddp``), or ``""`` for a module
    directly in ``package``."""
    inner = path.relative_to(root / package).parts
    return inner[0] if len(inner) > 1 else ""


def undeclared_parts(root: Path, package: str, core: set[str], layers: dict[str, int]) -> list[str]:
    """What ``package`` holds that its declaration does not: a top-level module missing from
    ``core`` (or listed there and absent), a subpackage ``layers`` gives no layer."""
    top = {path.stem for path in (root / package).glob("*.py")} - {"__init__"}
    subpackages = {path.parent.name for path in (root / package).glob("*/__init__.py")}
    return sorted(
        [f"{package}/{name}.py: a top-level module not in the core's list" for name in top - core]
        + [f"{package}/{name}.py: in the core's list, not in the tree" for name in core - top]
        + [f"{package}/{name}/: a package of no layer" for name in subpackages - layers.keys()])


def layer_problems(root: Path, package: str, layers: dict[str, int]) -> list[str]:
    """``"a (layer x) imports b (layer y)"`` for each import, at any depth, of a higher layer.

    ``layers`` gives each part of ``package`` (``""``: its top-level modules, else a subpackage's
    name) its layer; parts of one layer may import each other. Parts without a layer are
    ``undeclared_parts``'s to report.
    """
    modules = module_files(root, (package,))
    layer = {name: layers.get(part_of(root, package, path)) for name, path in modules.items()}
    found = []
    for name, path in modules.items():
        for target in sorted(imports(path, modules, top_level=False) & modules.keys()):
            if None not in (layer[name], layer[target]) and layer[target] > layer[name]:
                found.append(f"{name} (layer {layer[name]}) imports {target}"
                             f" (layer {layer[target]})")
    return found
