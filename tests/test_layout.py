"""The architecture of ARCHITECTURE.md, checked: which package may import which."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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
