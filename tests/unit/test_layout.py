"""The architecture of ARCHITECTURE.md, checked: which package may import which."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHAPTER_PACKAGES = ("fast", "ddp", "shards", "fsdp")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("common"), ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_in_common_imports_the_course_tooling(path):
    assert not {m for m in _imports(path) if m == "course" or m.startswith("course.")}


@pytest.mark.parametrize("path", sorted((REPO / "common").glob("*.py")),
                         ids=lambda p: p.name)
def test_the_core_imports_no_chapter_package(path):
    if path.name == "__init__.py":  # the facade re-exports what the notebooks import
        return
    chapter = {m for m in _imports(path) if m.split(".")[:2][-1] in CHAPTER_PACKAGES
               and m.startswith("common.")}
    assert not chapter, f"{path.name} (core) imports {chapter}"


def test_chapter_packages_import_only_earlier_chapters():
    order = {"fast": 3, "ddp": 4, "shards": 5, "fsdp": 6}
    for package, chapter in order.items():
        for path in _modules(f"common/{package}"):
            for module in _imports(path):
                parts = module.split(".")
                if parts[0] == "common" and len(parts) > 1 and parts[1] in order:
                    assert order[parts[1]] <= chapter, f"{path} imports {module}"


def test_no_module_is_too_long_to_read_in_one_sitting():
    for path in _modules("common") + _modules("course"):
        assert len(path.read_text().splitlines()) < 420, f"{path} is too long; split it"


def test_the_architecture_doc_names_every_package():
    text = (REPO / "ARCHITECTURE.md").read_text()
    for package in ("common/", "common/fast/", "common/ddp/", "common/shards/", "common/fsdp/", "course/"):
        assert f"`{package}`" in text


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _course_imports() -> dict[str, set[str]]:
    """Each module of ``course`` and the ``course`` modules it imports (``from a import b``: ``a.b``
    where that is a module, else ``a``), at any depth of its code (``TYPE_CHECKING`` too)."""
    modules = {_module_name(p): p for p in _modules("course")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                          for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
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


def test_the_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_the_course_tooling_has_no_import_circle():
    assert _cycle(_course_imports()) == []


def test_what_runs_inside_the_sandbox_imports_nothing_of_the_host_side():
    """The sandbox shows only ``course/grading/inside/`` (and the student-side ``course.checks``)."""
    for name, imported in _course_imports().items():
        if name.startswith("course.grading.inside"):
            outside = {m for m in imported if not m.startswith("course.grading.inside")}
            assert not outside, f"{name} imports {outside}"
    init = REPO / "course" / "grading" / "__init__.py"
    assert not _imports(init), "importing an inside module must not load the host side"


def test_no_private_name_crosses_a_file_boundary_in_the_course_tooling():
    for path in _modules("course"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.relative_to(REPO)} imports {private} from {node.module}"
