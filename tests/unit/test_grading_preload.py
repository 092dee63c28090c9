"""What a judge's zygote imports before it forks templates (course.grading.judges.setup_imports,
course.grading.inside.processes.preload); the judges themselves: tests/system/test_judge.py."""

from __future__ import annotations

import sys

from course.grading.inside.processes import preload
from course.grading.judges import setup_imports


def test_setup_imports_lists_the_absolute_imports_of_the_setup_cells_only():
    requests = [{"op": "setup", "index": 0, "code": "import torch, numpy as np\nfrom torch import nn\n"
                 "from . import local\nimport torch"},
                {"op": "exercise", "key": "ex1", "answer": "import pandas", "check": "import json"},
                {"op": "setup", "index": 3, "code": "%matplotlib inline"},  # not Python: skipped
                {"op": "setup", "index": 4, "code": "def f():\n    import csv"}]
    assert setup_imports(requests) == ["torch", "numpy", "csv"]


def test_preload_imports_what_lies_outside_the_working_copy_and_skips_the_rest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "written_by_setup.py").write_text("raise AssertionError('imported before its setup cell')\n")
    for name in ("written_by_setup", "xml.dom.minidom", "no_such_module_here"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    preload(["written_by_setup", "xml.dom.minidom", "no_such_module_here"])
    assert "xml.dom.minidom" in sys.modules, "a library module is imported once, for every template"
    assert "written_by_setup" not in sys.modules, "a module in the working copy is the setup cell's to import"
