"""The learner's path is the tested path: the tests change each notebook's parameters cell and nothing
else (tests/notebook_parameters.py), and no lesson or library module knows whether a test is running."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from tests.notebook_parameters import (
    TEST_PARAMETERS,
    apply_parameters,
    parameters_cells,
    rewrite_source,
)

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted([*REPO.glob("chapters/*.ipynb"), *REPO.glob("chapters/zh/*.ipynb"),
                    *REPO.glob("chapters/exercises/**/*.ipynb"), *REPO.glob("chapters/zh/exercises/**/*.ipynb")])
#: What only the test harness may know: a switch, a test-speed path, nbval's comment markers.
TEST_ONLY = re.compile(r"COMPANION_QUICK|is_quick_run|\bsized\(|common\.quick|NBVAL_|run_forked|fork_workers|"
                       r"tests\.speedups|common\.ddp\.agent|common\.ddp\.forking")


def test_the_rewrite_replaces_values_and_keeps_the_text_around_them():
    source = "# Sizes.\nNUM_EPOCHS = 24  # epochs\nSIZES = (0, 1,\n         2)  # workers\nNAME = 'x'\n"
    assert rewrite_source(source, {"NUM_EPOCHS": 3, "SIZES": (0, 2)}) == (
        "# Sizes.\nNUM_EPOCHS = 3  # epochs\nSIZES = (0, 2)  # workers\nNAME = 'x'\n")
    assert rewrite_source("A = 'café'; B = 1\n", {"B": 2}) == "A = 'café'; B = 2\n"


@pytest.mark.parametrize(("source", "message"), [("A = 1\n", "assigns no B"), ("B = 1\nB = 2\n", "assigned twice")])
def test_the_rewrite_refuses_a_name_the_cell_does_not_assign_once(source, message):
    with pytest.raises(ValueError, match=message):
        rewrite_source(source, {"B": 3})


def test_a_notebook_has_at_most_one_parameters_cell_and_the_tests_need_one():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("A = 1", metadata={"tags": ["parameters"]})
                                         for _ in range(2)])
    with pytest.raises(ValueError, match="2 cells are tagged"):
        apply_parameters(nb, "x.ipynb")
    with pytest.raises(ValueError, match="no code cell is tagged"):
        apply_parameters(nbformat.v4.new_notebook(), next(iter(TEST_PARAMETERS), "x") + ".ipynb")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_test_run_changes_the_parameters_cell_only_and_keeps_its_shape(path):
    committed = nbformat.read(path, as_version=4)
    tested = apply_parameters(nbformat.read(path, as_version=4), path)
    found = parameters_cells(committed.cells)
    assert len(found) <= 1, f"{path.name}: one parameters cell holds every size"
    for index, (before, after) in enumerate(zip(committed.cells, tested.cells, strict=True)):
        if index not in found:
            assert before.source == after.source, f"{path.name} cell {index}: only the parameters cell may change"
    if found:
        before = _assignments(committed.cells[found[0]].source)
        after = _assignments(tested.cells[found[0]].source)
        assert before.keys() == after.keys(), "the same names, learner's values replaced"
        for name, value in after.items():
            assert type(value) is type(before[name]), f"{path.name}: {name} keeps its type in a test run"


def test_every_notebook_the_tests_shrink_exists_and_has_its_cell():
    stems = {path.stem for path in NOTEBOOKS}
    for stem, values in TEST_PARAMETERS.items():
        assert stem in stems, f"tests/notebook_parameters.py names {stem}, which is no notebook"
        assert values, f"{stem}: an entry with no values changes nothing"


def _assignments(source: str) -> dict[str, object]:
    """The cell's top-level ``NAME = literal`` assignments (a parameters cell holds nothing else)."""
    values = {}
    for node in ast.parse(source).body:
        assert isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name), (
            f"a parameters cell holds assignments only, not {ast.unparse(node)!r}")
        values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def _learner_files() -> list[Path]:
    files = [*REPO.glob("common/**/*.py"), *REPO.glob("chapters/**/*.py"), *REPO.glob("chapters/**/*.ipynb")]
    return sorted(path for path in files if "__pycache__" not in path.parts)


def test_nothing_a_learner_runs_or_reads_knows_about_the_tests():
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in _learner_files()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if TEST_ONLY.search(line)]
    assert not found, "test-speed code or a test switch where learners read:\n" + "\n".join(found[:20])


def test_the_scan_would_see_a_switch():
    assert TEST_ONLY.search("NUM_EPOCHS = sized(24, quick=3)") and TEST_ONLY.search("# NBVAL_CHECK_OUTPUT")
    assert not TEST_ONLY.search("resized(image)") and not TEST_ONLY.search("NUM_EPOCHS = 24")
