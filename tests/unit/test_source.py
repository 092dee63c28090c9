"""common.source: sources and diffs that display highlighted and read as plain text."""

from __future__ import annotations

from common.models import count_parameters
from common.source import changed_lines, show_diff, show_source


def test_show_source_titles_with_the_repository_relative_file_and_line():
    code = show_source(count_parameters)
    assert code.title.startswith("common/models.py, line ")
    assert code.text.startswith("def count_parameters(")
    assert "def count_parameters(" in repr(code)
    html = code._repr_html_()
    assert "<span" in html and "common/models.py" in html


def test_show_diff_is_a_unified_diff_with_the_added_and_removed_lines():
    before = "a = 1\nb = 2\nc = 3\n"
    after = "a = 1\nb = 20\nc = 3\nd = 4\n"
    diff = show_diff(before, after, before_name="v1.py", after_name="v2.py")
    assert diff.text.startswith("--- v1.py\n+++ v2.py\n")
    assert "-b = 2\n" in diff.text and "+b = 20\n" in diff.text and "+d = 4\n" in diff.text
    assert changed_lines(before, after) == (1, 2)
    assert "<span" in diff._repr_html_()


def test_show_source_keeps_the_indentation_of_the_body():
    code = show_source(count_parameters)
    assert "\n    " in code.text and code.text.splitlines()[0].startswith("def ")
