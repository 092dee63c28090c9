"""course.assignments: instructor sources follow the conventions; student versions are safe to hand out — the tests that start processes (the rest: tests/unit/test_assignments.py)."""

from __future__ import annotations

import nbformat
import pytest

from course.assignments import (
    exercises_of,
)
from tests.unit.test_assignments import SOURCES, built, student_runs  # noqa: F401


@pytest.mark.slow
@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_student_versions_run_top_to_bottom_reporting_every_exercise_not_done(student_runs, path):
    executed = student_runs[path.name]
    errors = [f"cell {i}: {o.ename}: {o.evalue}" for i, cell in enumerate(executed)
              for o in cell.get("outputs", []) if o.output_type == "error"]
    assert not errors, f"{path.name} does not run top to bottom: {errors}"
    for exercise in exercises_of(nbformat.read(path, as_version=4)):
        outputs = executed[exercise.tests_cell].outputs
        text = "".join(o.get("text", "") for o in outputs)
        assert "not yet done" in text, f"{path.name} {exercise.key}: {outputs}"
