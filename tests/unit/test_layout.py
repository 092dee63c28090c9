"""The architecture of ARCHITECTURE.md, checked statically (``tests/unit/layout.py``: ast, no torch).

Which package may import which, no import circle anywhere, and the facade rule: no module
imports an entry point, a facade lists its own package's names, one name per function.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.unit import layout

REPO = Path(__file__).resolve().parents[2]
#: The core's top-level modules (ARCHITECTURE.md), each used by more than one chapter: what chapters
#: 1-2 teach and later chapters use again, and the helpers of every chapter. A module one chapter
#: alone uses goes to that chapter's package, not here.
CORE = frozenset({
    "annotations", "atomic_io", "cli", "data", "device", "digests", "imagenet", "lazy", "loaders", "models",
    "paths", "plotting", "readings", "shapes", "source", "stats", "storage", "synthetic", "training",
    "transforms"})
#: Each part of ``common`` and its layer: ``""`` the top-level modules, and ``images`` (chapter 7,
#: read by every trainer's ``--data``) the core; each chapter package its chapter (``datasets``:
#: chapter 2.3's); the programs beside the chapters on top. A module imports its own layer and
#: those below.
LAYERS = {"": 0, "images": 0, "datasets": 2, "fast": 3, "ddp": 4, "shards": 5, "fsdp": 6,
          "tools": 9, "diagrams": 9}


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


def test_the_core_is_its_list_and_every_package_has_a_layer():
    """An extra top-level module, a listed one gone or a subpackage of no layer fails here."""
    assert len(CORE) <= 20, "the core holds what several chapters use: keep it small"
    assert layout.undeclared_parts(REPO, "common", set(CORE), LAYERS) == []


def test_imports_go_down_the_layers_of_common():
    """The core imports no chapter package and no tool; a chapter package only earlier chapters'
    packages and the core; at any depth (an import inside a function loads the module too)."""
    assert layout.layer_problems(REPO, "common", LAYERS) == []


def test_an_extra_module_or_an_import_up_the_layers_is_found_in_a_tree(tmp_path):
    _tree(tmp_path, {
        "pkg/__init__.py": "", "pkg/cli.py": "", "pkg/extra.py": "",
        "pkg/data.py": "def late():\n    from pkg.ch5.reader import read\n",
        "pkg/ch3/__init__.py": "from pkg import data\nimport pkg.ch5\n", "pkg/ch5/__init__.py": "",
        "pkg/ch5/reader.py": "from pkg.ch3 import x\nfrom pkg.tools import doctor\n",
        "pkg/tools/__init__.py": "", "pkg/tools/doctor.py": "from pkg.ch5 import reader\n",
        "pkg/odd/__init__.py": ""})
    layers = {"": 0, "ch3": 3, "ch5": 5, "tools": 9}
    assert layout.undeclared_parts(tmp_path, "pkg", {"cli", "data", "gone"}, layers) == [
        "pkg/extra.py: a top-level module not in the core's list",
        "pkg/gone.py: in the core's list, not in the tree", "pkg/odd/: a package of no layer"]
    assert layout.layer_problems(tmp_path, "pkg", layers) == [
        "pkg.ch3 (layer 3) imports pkg.ch5 (layer 5)",
        "pkg.ch5.reader (layer 5) imports pkg.tools.doctor (layer 9)",
        "pkg.data (layer 0) imports pkg.ch5.reader (layer 5)"]


def test_the_architecture_doc_lists_the_core():
    """ARCHITECTURE.md's core table names every module of ``CORE``, and no other."""
    text = (REPO / "ARCHITECTURE.md").read_text()
    section = text.split("## `common/` — the core", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`(\w+)`", row)}
    assert named == CORE, (f"the table, not CORE: {sorted(named - CORE)}; "
                           f"CORE, not the table: {sorted(CORE - named)}")
    assert "| `images/` |" in section


#: A module holds one role (STYLE.md); past this many lines it is two, and fails here.
MAX_LINES = 600
#: Past this many it is listed for a look (printed by ``pytest -s``): a long module of one role may stay.
LOOK_AT = 400


def test_no_module_is_too_long_to_read_in_one_sitting():
    lengths = {path: len(path.read_text().splitlines()) for path in _modules("common") + _modules("course")}
    too_long = [f"{path.relative_to(REPO)}: {n} lines" for path, n in lengths.items() if n > MAX_LINES]
    assert not too_long, f"split by role: {too_long}"
    for path, n in sorted(lengths.items(), key=lambda item: -item[1]):
        if n > LOOK_AT:
            print(f"for a look (one role?): {path.relative_to(REPO)}, {n} lines")


def test_the_size_rule_would_catch_a_long_module(tmp_path):
    long_module = tmp_path / "m.py"
    long_module.write_text("x = 1\n" * (MAX_LINES + 1))
    assert len(long_module.read_text().splitlines()) > MAX_LINES >= LOOK_AT


def test_the_architecture_doc_names_every_package():
    text = (REPO / "ARCHITECTURE.md").read_text()
    for package in ("common/", *(f"common/{part}/" for part in LAYERS if part), "course/"):
        assert f"`{package}`" in text


def _course_imports() -> dict[str, set[str]]:
    """Each module of ``course`` and the ``course`` modules it imports, at any depth of its code
    (``TYPE_CHECKING`` too)."""
    return layout.import_graph(layout.module_files(REPO, ("course",)), top_level=False)


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    """A fake repository: ``{"pkg/a.py": source}`` written under ``root``; its modules."""
    for name, source in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source)
    return layout.module_files(root, ("pkg",))


def test_the_cycle_finder_finds_a_circle():
    assert layout.cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert layout.cycle({"a": {"b"}, "b": set()}) == []


def test_a_circle_of_module_level_imports_is_found_in_a_tree(tmp_path):
    modules = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import pkg.b\n",
                               "pkg/b.py": "try:\n    from pkg.a import x\nexcept ImportError:\n"
                                           "    x = 1\n",
                               "pkg/c.py": "def late():\n    import pkg.d\n",
                               "pkg/d.py": "from pkg import c\n"})
    assert layout.cycle(layout.import_graph(modules, top_level=True)) == ["pkg.a", "pkg.b", "pkg.a"]
    del modules["pkg.a"]  # c -> d -> c only inside a function: no circle at import time
    assert layout.cycle(layout.import_graph(modules, top_level=True)) == []
    assert layout.cycle(layout.import_graph(modules, top_level=False)) == ["pkg.c", "pkg.d", "pkg.c"]


def test_no_import_circle_anywhere_in_the_repository():
    """common, course, data_scripts and the tests' helpers: the imports that run at import time."""
    modules = layout.module_files(REPO)
    assert len(modules) > 150 and {"common.ddp.trainer", "tests.unit.layout"} <= set(modules)
    assert layout.cycle(layout.import_graph(modules, top_level=True)) == []


def test_the_course_tooling_has_no_import_circle():
    assert layout.cycle(_course_imports()) == []


def test_the_entry_points_are_found():
    entries = layout.entry_points(REPO, layout.module_files(REPO, ("common",)))
    assert {"common.ddp.train", "common.ddp.bench", "common.fast.benchmark", "common.shards.bench",
            "common.tools.make_data", "common.diagrams.__main__"} <= entries
    assert not {"common.ddp.trainer", "common.fast.timing", "common.models"} & entries
    assert layout.console_scripts(REPO / "pyproject.toml") == {
        "common.tools.make_data", "common.shards.make", "common.images.check", "common.images.split"}


def test_an_import_of_an_entry_point_is_found_in_a_tree(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project.scripts]\ntool = "pkg.script:main"\n')
    modules = _tree(tmp_path, {
        "pkg/__init__.py": '_WHERE = {"run": "pkg.guarded"}\n',
        "pkg/guarded.py": 'def run():\n    pass\n\nif __name__ == "__main__":\n    run()\n',
        "pkg/script.py": "def main():\n    return 0\n", "pkg/sub/__main__.py": "x = 1\n",
        "pkg/lib.py": "from pkg import script\n\ndef late():\n    from pkg.sub.__main__ import x\n",
        "pkg/fine.py": "import pkg.lib\n"})
    assert layout.entry_point_imports(tmp_path, modules, "pkg") == [
        "pkg imports pkg.guarded", "pkg.lib imports pkg.script", "pkg.lib imports pkg.sub.__main__"]


def test_no_module_in_common_imports_an_entry_point():
    """What two programs share lives in a library module (ARCHITECTURE.md, "The facade rule")."""
    modules = layout.module_files(REPO)
    assert layout.entry_point_imports(REPO, modules, "common") == []


def test_no_module_in_course_imports_an_entry_point():
    """A program another module needs is a package: its library in ``__init__``, its command line in
    ``__main__`` (``course.assignments``, ``course.publishing.translate``, ``course.publishing.figures``)."""
    modules = layout.module_files(REPO)
    entries = layout.entry_points(REPO, modules)
    assert {"course.assignments.__main__", "course.publishing.translate.__main__", "course.publishing.site",
            "course.grading.__main__"} <= entries
    assert not {"course.assignments", "course.publishing.translate", "course.publishing.figures"} & entries
    assert layout.entry_point_imports(REPO, modules, "course") == []


def test_a_library_package_with_its_program_in_main_passes_and_its_main_is_caught(tmp_path):
    package = {"pkg/__init__.py": "", "pkg/tool/__init__.py": "def build():\n    pass\n",
               "pkg/tool/__main__.py": "from pkg.tool import build\n\nbuild()\n"}
    fine = _tree(tmp_path / "fine", {**package, "pkg/user.py": "from pkg.tool import build\n"})
    assert layout.entry_point_imports(tmp_path / "fine", fine, "pkg") == []
    broken = _tree(tmp_path / "broken", {**package, "pkg/user.py": "from pkg.tool.__main__ import build\n"})
    assert layout.entry_point_imports(tmp_path / "broken", broken, "pkg") == ["pkg.user imports pkg.tool.__main__"]


#: The student runtime: what the exercise notebooks import at run time, in the kernel and the sandbox.
STUDENT = "course.student"


def test_the_student_runtime_imports_nothing_of_the_instructor_tooling():
    modules = layout.module_files(REPO)
    assert {f"{STUDENT}.checks", f"{STUDENT}.messages"} <= set(modules)
    assert layout.imports_beyond(modules, STUDENT, (STUDENT,), package="course") == []


def test_an_import_of_instructor_tooling_by_the_runtime_is_found_in_a_tree(tmp_path):
    modules = _tree(tmp_path, {
        "pkg/__init__.py": "", "pkg/runtime/__init__.py": "", "pkg/runtime/messages.py": "",
        "pkg/runtime/checks.py": "from typing import TYPE_CHECKING\nimport json\nfrom pkg.runtime import messages\n"
                                 "if TYPE_CHECKING:\n    from pkg.tooling import Exercise\n\n"
                                 "def late():\n    import pkg.grader\n",
        "pkg/tooling.py": "from pkg.runtime.checks import late\n", "pkg/grader.py": ""})
    assert layout.imports_beyond(modules, "pkg.runtime", ("pkg.runtime",), package="pkg") == [
        "pkg.runtime.checks imports pkg.grader", "pkg.runtime.checks imports pkg.tooling"]


def _exposed() -> tuple[str, ...]:
    return layout.constant(REPO / "course" / "grading" / "judges.py", "EXPOSED")


def test_the_sandbox_shows_the_runtime_and_common_and_no_instructor_tooling():
    """``judges.EXPOSED``: what student code can read. Everything shown imports only what is shown,
    and what the exercise notebooks import of ``course`` is the student runtime."""
    modules = layout.module_files(REPO)
    shown = layout.shown_modules(REPO, modules, _exposed())
    assert {f"{STUDENT}.checks", "course.grading.inside.judge", "common.data"} <= shown
    tooling = {m for m in shown if m.startswith(("course.assignments", "course.publishing"))
               or (m.startswith("course.grading.") and not m.startswith("course.grading.inside"))}
    assert not tooling
    assert layout.unshown_imports(REPO, modules, _exposed()) == []
    for twin in sorted((REPO / "chapters" / "exercises" / "solutions").glob("ex[0-9][0-9]_*.py")):
        used = {m for m in layout.imports(twin, modules, top_level=False) if m.startswith("course")}
        assert used and used <= shown, f"{twin.name} imports {used - shown}, which the sandbox does not show"


def test_a_shown_module_importing_an_unshown_one_is_found_in_a_tree(tmp_path):
    modules = _tree(tmp_path, {
        "pkg/__init__.py": "", "pkg/runtime/__init__.py": "", "pkg/runtime/checks.py": "",
        "pkg/inside/__init__.py": "", "pkg/inside/judge.py": "def late():\n    from pkg.tooling import x\n",
        "pkg/tooling.py": "x = 1\n"})
    shown = ("pkg/__init__.py", "pkg/runtime", "pkg/inside")
    assert layout.shown_modules(tmp_path, modules, shown) == {
        "pkg", "pkg.runtime", "pkg.runtime.checks", "pkg.inside", "pkg.inside.judge"}
    assert layout.unshown_imports(tmp_path, modules, shown) == ["pkg.inside.judge imports pkg.tooling"]
    assert layout.unshown_imports(tmp_path, modules, shown[1:]) == [  # a package's parent runs first
        "pkg.inside imports pkg", "pkg.inside.judge imports pkg", "pkg.inside.judge imports pkg.tooling",
        "pkg.runtime imports pkg", "pkg.runtime.checks imports pkg"]


def test_no_two_library_functions_share_a_name_with_other_parameters():
    modules = layout.module_files(REPO, ("common", "course"))
    assert layout.shared_function_names(REPO, modules) == []


def test_a_shared_function_name_is_found_in_a_tree(tmp_path):
    modules = _tree(tmp_path, {
        "pkg/cli.py": "def parse(config_cls, argv):\n    pass\n",
        "pkg/config.py": "def parse(argv):\n    pass\n\ndef check(config):\n    pass\n",
        "pkg/other.py": "def check(config):\n    pass\n\ndef _parse(x):\n    pass\n",
        "pkg/tool.py": 'def check(x):\n    pass\n\nif __name__ == "__main__":\n    check(1)\n'})
    assert layout.shared_function_names(tmp_path, modules) == [
        "parse: pkg.cli(config_cls, argv, *), pkg.config(argv, *)"]


def test_the_facades_list_their_own_package_s_names_defined_where_they_say():
    modules = layout.module_files(REPO, ("common",))
    assert layout.lazy_map(modules["common"])["SmallCNN"] == "common.models"
    assert layout.lazy_map(modules["common.fast"]), "common.fast is a lazy facade too"
    assert layout.facade_problems(REPO, modules) == []


def test_a_facade_exception_is_found_in_a_tree(tmp_path):
    modules = _tree(tmp_path, {
        "pkg/__init__.py": '_WHERE = {"Reader": "pkg.chapter", "helper": "pkg.tool",'
                           ' "Error": "pkg.data", "Model": "pkg.models", "Other": "elsewhere.x"}\n',
        "pkg/chapter/__init__.py": "class Reader:\n    pass\n",
        "pkg/tool.py": 'def helper():\n    pass\n\nif __name__ == "__main__":\n    helper()\n',
        "pkg/data.py": "from pkg.errors import Error\n", "pkg/errors.py": "class Error(Exception):\n"
                                                              "    pass\n",
        "pkg/models.py": "class Model:\n    pass\n"})
    assert layout.facade_problems(tmp_path, modules) == [
        "pkg.Error -> pkg.data: not defined there", "pkg.Other -> elsewhere.x: not a module of pkg",
        "pkg.Reader -> pkg.chapter: not a module of pkg", "pkg.helper -> pkg.tool: an entry point"]


def test_the_imagenet_statistics_and_a_ddp_worker_import_no_torchvision():
    """``from common import IMAGENET_MEAN`` stays light, and so does ``common.ddp.train``: a
    DDP worker on the cache path pays for no torchvision (common/__init__.py)."""
    modules = layout.module_files(REPO, ("common",))
    where = layout.lazy_map(modules["common"])
    for name in ("IMAGENET_MEAN", "IMAGENET_STD"):
        assert not layout.external_closure(where[name], modules) & {"torch", "torchvision"}
    assert "torchvision" not in layout.external_closure("common.ddp.train", modules)
    assert "torchvision" in layout.external_closure(where["V2EvalPreset"], modules)  # can fail


def test_the_folder_tools_and_make_shards_start_without_the_trainers_imports():
    """``python -m common.images.check`` and ``split`` answer ``--help`` or a bad flag without
    importing torch (about 1.4 s of CPU), ``common.shards.make`` without the reader's
    torchvision (common/shards/__init__.py names its modules lazily). (pandas is imported inside
    the functions that read a CSV, which this import-time closure cannot tell from a
    ``TYPE_CHECKING`` import.)"""
    modules = layout.module_files(REPO, ("common",))
    for entry in ("common.images.check", "common.images.split"):
        heavy = layout.external_closure(entry, modules) & {"torch", "torchvision"}
        assert not heavy, f"{entry} imports {heavy}"
    heavy = layout.external_closure("common.shards.make", modules) & {"torchvision"}
    assert not heavy, f"common.shards.make imports {heavy}"
    assert "torch" in layout.external_closure("common.images.layouts", modules)  # can fail


def test_the_run_log_writes_no_model():
    """Logging logs; the trainers save the final weights (``common.ddp.trainer.save_final_weights``)."""
    modules = layout.module_files(REPO, ("common",))
    used = layout.imports(modules["common.ddp.run_log"], modules, top_level=False)
    assert not used & {"torch", "common.ddp.snapshot"}, used


def test_what_runs_inside_the_sandbox_imports_nothing_of_the_host_side():
    """The sandbox shows ``course/grading/inside/`` (and the student runtime, ``course/student/``)."""
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
