"""tests.system_parts: a missing system part skips a test with its reason, and fails it under CI."""

from __future__ import annotations

import pytest

from tests import system_parts
from tests.system_parts import (
    bubblewrap_missing,
    in_ci,
    require,
    require_bubblewrap,
    require_program,
)

#: pytest's outcome exceptions (pytest.skip.Exception, pytest.fail.Exception).
SKIPPED, FAILED = pytest.skip.Exception, pytest.fail.Exception


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("TRUE", True), ("1", True), (" true\n", True),
                                                 ("", False), ("false", False), ("0", False), ("yes", False)])
def test_in_ci_reads_the_ci_variable_as_ci_services_set_it(monkeypatch, value, expected):
    monkeypatch.setenv("CI", value)
    assert in_ci() is expected


def test_a_part_that_is_there_neither_skips_nor_fails(monkeypatch):
    for ci in ("true", ""):
        monkeypatch.setenv("CI", ci)
        assert require("bubblewrap", None) is None


def test_outside_ci_a_missing_part_skips_with_its_reason(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(SKIPPED) as skipped:
        require("Chromium", "chromium not found on PATH (make system-deps)")
    assert str(skipped.value) == "Chromium missing: chromium not found on PATH (make system-deps)"


def test_under_ci_a_missing_part_fails_naming_it(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(FAILED) as failed:
        require("Chromium", "chromium not found on PATH (make system-deps)")
    assert str(failed.value) == ("CI needs Chromium, and it is missing: chromium not found on PATH "
                                 "(make system-deps)")
    assert not failed.value.pytrace, "one line, no traceback"


def test_a_missing_program_is_named_with_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(SKIPPED, match=r"^uidmap missing: newuidmap not found on PATH \(make system-deps\)$"):
        require_program("uidmap", "newuidmap")
    (tmp_path / "newuidmap").write_text("#!/bin/sh\n")
    (tmp_path / "newuidmap").chmod(0o755)
    assert require_program("uidmap", "newuidmap") == str(tmp_path / "newuidmap")


def test_with_bubblewrap_hidden_the_sandbox_tests_skip_outside_ci_and_fail_under_it(monkeypatch, tmp_path):
    """The issue's check: bwrap off PATH (no process is started: the probe stops at `which`)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = bubblewrap_missing()
    assert reason.startswith("bwrap not found") and "make system-deps" in reason, reason
    assert "apparmor_restrict_unprivileged_userns" in reason, "the Ubuntu 24.04 runner's setting is named"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(SKIPPED, match=r"^bubblewrap missing: bwrap not found"):
        require_bubblewrap()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(FAILED, match=r"^CI needs bubblewrap, and it is missing: bwrap not found"):
        require_bubblewrap()


def test_a_bwrap_that_cannot_start_is_missing_too(monkeypatch, tmp_path):
    """Installed but refused its user namespaces (Ubuntu 24.04's AppArmor): the probe's error is the reason."""
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "bwrap").write_text("#!/bin/sh\n")
    (tmp_path / "bwrap").chmod(0o755)
    refused = "bwrap does not work here: bwrap: setting up uid map: Permission denied; UNSAFE FOR ..."
    monkeypatch.setattr("course.grading.sandbox.choose_sandbox", lambda mode: ("none", refused))
    system_parts.probe_bubblewrap.cache_clear()
    try:
        reason = bubblewrap_missing()
    finally:
        system_parts.probe_bubblewrap.cache_clear()
    assert reason.startswith("bwrap does not work here: bwrap: setting up uid map: Permission denied; ")
    assert "UNSAFE" not in reason
