"""common.quick: the tiny sizes of `make test`, chosen by COMPANION_QUICK only."""

from __future__ import annotations

import pytest

from common.quick import QUICK_ENV, is_quick_run, sized


@pytest.mark.parametrize(("value", "quick"), [(None, False), ("", False), ("0", False),
                                              ("1", True), ("yes", True)])
def test_the_variable_decides(monkeypatch, value, quick):
    if value is None:
        monkeypatch.delenv(QUICK_ENV, raising=False)
    else:
        monkeypatch.setenv(QUICK_ENV, value)
    assert is_quick_run() is quick
    assert sized(24, quick=3) == (3 if quick else 24)
    assert sized(["--full"], quick=["--tiny"]) == (["--tiny"] if quick else ["--full"])


def test_the_makefile_sets_it_for_make_test_only():
    from tests.unit.test_makefile import REPO

    text = (REPO / "Makefile").read_text()
    assert text.count(f"{QUICK_ENV}=1") == 1
