"""course.publishing.notebooks build: a timing measured on a busy machine is not stored (common/readings.py says why)."""

from __future__ import annotations

import nbformat
import pytest

from common.readings import Machine, Reading
from course.publishing import notebooks


def _reading(load: float) -> str:
    return str(Reading(key="03_1/cache", value=4.0, unit="×", what="the cache", expect=(">=", 3.0),
                       machine=Machine(cores=2, load=load))) + "\n"


@pytest.fixture
def chapter(tmp_path, monkeypatch):
    """A one-cell notebook whose "execution" prints a reading at the load the test sets."""
    path = tmp_path / "exercises" / "03_1_x.ipynb"  # not in chapters/: no Colab cells are inserted
    path.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)
    load = {"value": 0.5}

    class FakeClient:
        def __init__(self, nb, **_):
            self.nb = nb

        def execute(self):
            cell = self.nb.cells[0]
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=_reading(load["value"]))]
            cell.execution_count = 1

    monkeypatch.setattr(notebooks, "NotebookClient", FakeClient)
    return path, load


def test_a_quiet_run_is_stored(chapter):
    path, _ = chapter
    assert notebooks.build(path) == []
    assert "load average 0.5" in nbformat.read(path, as_version=4).cells[0].outputs[0].text
    assert path.with_suffix(".py").is_file()


def test_a_busy_run_is_refused_unless_allowed(chapter):
    path, load = chapter
    load["value"] = 3.5
    assert notebooks.build(path) == ["03_1_x.ipynb cell 0: 03_1/cache measured at load average 3.5 on 2 cores"]
    assert not nbformat.read(path, as_version=4).cells[0].outputs, "nothing was written"
    assert notebooks.build(path, allow_busy=True) == []
    assert "load average 3.5" in nbformat.read(path, as_version=4).cells[0].outputs[0].text
