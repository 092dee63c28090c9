"""No dead public code and no private name crossing modules (``tests/unit/references.py``): both
read the tree as it is, so a module moved or added is scanned without a list to update here."""

from __future__ import annotations

from pathlib import Path

from tests.unit import references

REPO = Path(__file__).resolve().parents[2]

#: ``"module.name"`` -> why a public definition nothing uses stays. Empty: none does.
UNUSED_ALLOWED: dict[str, str] = {}
#: ``(file, what)`` -> why a module may reach another's private name. Empty: none may.
REACH_ALLOWED: dict[tuple[str, str], str] = {}


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_every_public_function_and_class_is_used():
    assert references.dead(REPO, UNUSED_ALLOWED) == []


def test_the_scan_reads_every_module_and_its_users():
    modules = references.project_modules(REPO)
    assert {"common.data", "course.publishing.site", "tests.helpers", "data_scripts.make_shards"} <= set(modules)
    assert not [name for name in modules if name.startswith("tests.fixtures")]
    assert references.all_uses(REPO)["CustomImageDataset"] > 10


def test_a_dead_function_is_found_in_a_fake_tree(tmp_path):
    _tree(tmp_path, {
        "common/__init__.py": '_WHERE = {"exported": "common.m"}\n__all__ = ["listed"]\n',
        "common/m.py": '"""Mentions ``documented`` and ``dead``."""\n\n'
                       "def dead():\n    return dead()  # only itself\n\n"
                       "def exported():\n    pass\n\ndef listed():\n    pass\n\ndef documented():\n    pass\n\n"
                       "def called():\n    pass\n\ndef _private():\n    pass\n\nclass Unused:\n    pass\n\n"
                       "class Described:\n    pass\n\n"
                       "def by_string():\n    pass\n\ndef by_notebook():\n    pass\n\ndef by_entry_point():\n    pass\n",
        "common/user.py": 'from common.m import called\n\nSPEC = "common.m:by_string"\n',
        "tests/__init__.py": "",
        "tests/test_t.py": "import pytest\n\n@pytest.fixture\ndef wanted():\n    return 1\n\n"
                           "@pytest.fixture\ndef unwanted():\n    return 1\n\n"
                           "@pytest.fixture(autouse=True)\ndef always():\n    return 1\n\n"
                           "def test_x(wanted):\n    assert wanted\n\nclass TestY:\n    pass\n",
        "chapters/n.ipynb": '{"cells": [{"cell_type": "code", "source": ["%time by_notebook()"]},'
                            ' {"cell_type": "markdown", "source": ["Described"]}]}',
        "pyproject.toml": '[project.scripts]\ntool = "common.m:by_entry_point"\n',
    })
    assert references.dead(tmp_path, {"common.m.Unused": "a fake reason"}) == [
        "common.m.Described", "common.m.dead", "common.m.documented", "common.m.exported",
        "common.m.listed", "tests.test_t.unwanted"]


def test_no_module_reaches_a_private_name_of_another():
    assert references.private_reaches(REPO, REACH_ALLOWED) == []


def test_each_kind_of_private_reach_is_found_in_a_fake_tree(tmp_path):
    _tree(tmp_path, {
        "common/__init__.py": "",
        "common/a.py": "class Data:\n    def __init__(self):\n        self._rows = []\n\n"
                       "    def _load(self):\n        return self._rows\n\n"
                       "def _helper():\n    pass\n\ndef _repr_html_():\n    pass\n",
        "common/b.py": "from common.a import Data, _helper\nimport common.a as alias\nfrom common import a\n\n"
                       "def use(data: Data, other):\n"
                       "    other._cache = 1  # its own: set here\n"
                       "    return data._rows, alias._helper, a._repr_html_, other._cache, other._unknown\n",
        "common/c.py": "from common.a import Data\n\nclass Mine(Data):\n"
                       "    def rows(self):\n        return self._load()\n",
        "tests/__init__.py": "", "tools/__init__.py": "", "tools/t.py": "from common.a import _helper\n",
        "tests/test_a.py": "import common.a\n\ndef test_a(monkeypatch):\n"
                           '    monkeypatch.setattr(common.a, "_helper", None)\n'
                           '    monkeypatch.setattr("common.a._helper", None)\n'
                           '    assert getattr(common.a.Data, "_load") and common.a._helper\n',
    })
    assert references.private_reaches(tmp_path, {("common/c.py", "self._load (a private name of common.a)"):
                                                 "a fake reason"}) == [
        "common/b.py:1: imports _helper from common.a",
        "common/b.py:7: data._rows (a private name of common.a)",
        "common/b.py:7: alias._helper (common.a)",
        "tests/test_a.py:4: common.a._helper (common.a)",
        "tests/test_a.py:5: names 'common.a._helper'",
        "tests/test_a.py:6: common.a.Data._load (a private name of common.a)",
        "tests/test_a.py:6: common.a._helper (common.a)",
        "tools/t.py:1: imports _helper from common.a",
    ]
