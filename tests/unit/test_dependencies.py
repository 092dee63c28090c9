"""Every third-party import in `common/`, `course/` and `docs/` is declared in pyproject.toml.

The learner's package (`common`) and what the exercise notebooks import (`course.assignments`)
may use only the runtime dependencies, so `pip install .` is enough to run the chapters; the rest
of the course tooling may also use the `[instructor]` extra, and the tests the `[dev]` extra.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"common", "course", "tests", "conftest"}
#: The peers the shard benchmark compares against (optional; imported inside functions).
PEERS = {"litdata", "webdataset"}
#: Always there where pip is: the tests read TOML with pip's vendored tomli on Python 3.10.
INSTALLER = {"pip"}
#: Import names whose distribution differs, for when that distribution is not installed here.
KNOWN = {"PIL": "pillow", "yaml": "pyyaml", "myst_nb": "myst-nb", "jupyter_client": "jupyter-client",
         "jupyter_core": "jupyter-core", "sphinx_book_theme": "sphinx-book-theme"}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_normalise(re.match(r"[A-Za-z0-9_.\-]+", r).group(0)) for r in requirements}


def declared() -> dict[str, set[str]]:
    """Distribution names per group: runtime, instructor (adds runtime), dev (adds everything)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    runtime = _requirement_names(project["dependencies"])
    instructor = runtime | _requirement_names(extras["instructor"])
    dev = instructor | _requirement_names(extras["shards"]) | _requirement_names(extras["dev"])
    return {"runtime": runtime, "instructor": instructor, "dev": dev}


def third_party_imports(path: Path) -> set[str]:
    """Top-level names of the absolute, non-stdlib, non-first-party imports of one file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names
            if n not in sys.stdlib_module_names and n not in FIRST_PARTY | INSTALLER}


@functools.cache
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distributions_of(name: str) -> set[str]:
    installed = _installed().get(name, [])
    return {_normalise(d) for d in installed} | {_normalise(KNOWN.get(name, name))}


def undeclared(files: list[Path], allowed: set[str]) -> list[str]:
    return sorted(f"{path.relative_to(REPO)}: import {name}"
                  for path in files for name in third_party_imports(path)
                  if not distributions_of(name) & allowed)


def test_the_learners_package_imports_only_runtime_dependencies():
    files = sorted((REPO / "common").rglob("*.py")) + sorted((REPO / "course" / "student").rglob("*.py"))
    files += sorted((REPO / "course" / "grading").rglob("*.py"))  # make grade-me: a learner grades their own
    files += sorted((REPO / "data_scripts").glob("*.py"))
    found = [line for line in undeclared(files, declared()["runtime"])
             if not (line.startswith("common/shards/bench.py: ") and line.split()[-1] in PEERS)
             and not (line.startswith("common/shards/peers.py: ")
                      and line.split()[-1] in PEERS | {"streaming"})]
    assert not found, "declare in pyproject [project] dependencies"


def test_the_benchmark_peers_are_imported_only_where_they_are_optional():
    """litdata, webdataset and mosaic's streaming are what `common.shards.peers` compares against,
    imported inside the functions that measure them (installed separately; docs/scripts.md)."""
    text = (REPO / "common" / "shards" / "peers.py").read_text()
    for name in PEERS | {"streaming"}:
        assert re.search(rf"\n +(import {name}\b|from {name} import)", text), name
        assert not re.search(rf"\n(import|from) {name}\b", text), name


def test_the_course_tooling_imports_only_runtime_and_instructor_dependencies():
    files = sorted((REPO / "course").rglob("*.py")) + sorted((REPO / "docs").rglob("*.py"))
    assert not undeclared(files, declared()["instructor"]), "declare in pyproject [instructor]"


def test_the_tests_import_only_declared_dependencies():
    files = sorted((REPO / "tests").rglob("*.py"))
    assert not undeclared(files, declared()["dev"]), "declare in pyproject [dev]"


def test_an_undeclared_import_is_caught(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nimport numpy as np\nfrom PIL import Image\nimport yaml\n"
                      "from . import sibling\nfrom common import paths\n")
    assert third_party_imports(module) == {"numpy", "PIL", "yaml"}
    found = [n for n in sorted(third_party_imports(module))
             if not distributions_of(n) & declared()["runtime"]]
    assert found == ["yaml"]  # PyYAML is a [dev] dependency only


#: Files that spell out a `pip install` of torch (the CPU-only wheel index), besides pyproject.toml.
INSTALL_DOCS = ["Makefile", "README.md", "README.zh-CN.md", "CONTRIBUTING.md",
                *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
_PINNED = re.compile(r"\b(torch|torchvision)((?:[<>=!~]=?\s*[\d.*]+,?\s*)+)")


def pinned_ranges(text: str) -> set[tuple[str, str]]:
    """``("torch", ">=2.6")`` for each ``torch>=2.6`` / ``torchvision>=0.21`` written in ``text``."""
    return {(name, re.sub(r"\s+", "", spec).rstrip(",")) for name, spec in _PINNED.findall(text)}


def test_every_torch_range_written_in_the_docs_and_makefile_is_pyprojects():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared_ranges = pinned_ranges(" ".join(project["dependencies"]))
    assert {name for name, _ in declared_ranges} == {"torch", "torchvision"}
    found = {doc: pinned_ranges((REPO / doc).read_text(encoding="utf-8")) for doc in INSTALL_DOCS}
    assert found["Makefile"], "the Makefile's CPU-only install no longer names the torch range"
    wrong = {doc: sorted(ranges - declared_ranges) for doc, ranges in found.items() if ranges - declared_ranges}
    assert not wrong, f"torch ranges that differ from pyproject.toml's {sorted(declared_ranges)}: {wrong}"


def test_pinned_ranges_reads_the_ranges_and_not_the_package_name():
    text = 'pip install "torch>=2.4" "torchvision>=0.19,<1" torch-pipelines-companion torchrun'
    assert pinned_ranges(text) == {("torch", ">=2.4"), ("torchvision", ">=0.19,<1")}
