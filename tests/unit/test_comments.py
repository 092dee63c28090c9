"""Comments and docstrings state what holds now and why (``tests/unit/comments.py``): none narrates
the past (an issue's number, a measurement before and after, what the code did once); the
measurements live in docs/figures.md and the story in the commits."""

from __future__ import annotations

from pathlib import Path

from tests.unit import comments

REPO = Path(__file__).resolve().parents[2]

#: ``(file, a piece of the comment)`` -> why that comment must speak of the past. Empty: none must.
ALLOWED: dict[tuple[str, str], str] = {}


def test_no_comment_or_docstring_narrates_history():
    assert comments.history(REPO, ALLOWED) == []


def test_each_allowance_still_names_a_comment():
    assert comments.stale_allowances(REPO, ALLOWED) == []


def test_the_scan_reads_the_code_the_makefile_and_the_chapters_scripts():
    read = {path.relative_to(REPO).as_posix() for path in comments.scanned(REPO)}
    assert {"Makefile", "common/data.py", "tests/unit/test_comments.py", "data_scripts/make_shards.py",
            "chapters/scripts/04_1/ddp.py"} <= read
    assert "chapters/01_pytorch_basics.py" not in read, "a notebook's twin is the notebook's prose"


def _fake(root: Path) -> None:
    files = {
        "common/m.py": '"""A module.\n\nUsed to print the lines (issue 12).\n"""\n\n'
                       'MESSAGE = "see issue 12; 3 -> 4 s"  # a string is no comment\n'
                       "# 52 -> 32 CPU seconds here\n"
                       "def f():\n    \"\"\"What f did previously.\"\"\"\n"
                       "    # 65535 -> 255, and 2 -> 3 ranks: what the code does\n"
                       "    return 1  # it used to return 2\n",
        "common/__init__.py": "", "tests/__init__.py": "",
        "tests/test_t.py": "# the old checks let this through\n# kept: issue 7 must be named here\n",
        "chapters/scripts/s.py": "# now runs on 4 ranks instead of 2\n",
        "chapters/n.py": "# a twin's prose: issue 9\n", "chapters/n.ipynb": "{}",
        "Makefile": "X := 1  # make test: 514 -> 414 s\nurl := a#b  # measured 2026-11-30\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_scan_fails_on_each_kind_of_history_in_a_fake_tree(tmp_path):
    _fake(tmp_path)
    allowed = {("tests/test_t.py", "issue 7 must"): "a fake reason", ("tests/test_t.py", "gone"): "stale"}
    assert comments.history(tmp_path, allowed) == [
        "common/m.py:3: an issue's number: Used to print the lines (issue 12).",
        "common/m.py:7: a measurement before -> after: # 52 -> 32 CPU seconds here",
        "common/m.py:9: previously / formerly / no longer: What f did previously.",
        "common/m.py:11: what the code used to do: # it used to return 2",
        "tests/test_t.py:1: the old code: # the old checks let this through",
        "chapters/scripts/s.py:1: what changed: # now runs on 4 ranks instead of 2",
        "Makefile:1: a measurement before -> after: # make test: 514 -> 414 s",
        "Makefile:2: a dated figure: # measured 2026-11-30",
    ]
    assert comments.stale_allowances(tmp_path, allowed) == [("tests/test_t.py", "gone")]
