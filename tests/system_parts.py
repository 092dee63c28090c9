"""Tests that need a part of the system (bubblewrap, Chromium, Slurm, root for network namespaces).

Where such a part is missing, the test skips with one line saying what is missing and how to get it;
under CI (``CI=true``, as ``.ci/run`` runs) the same test fails instead, since CI installs every part
(``make system-deps``) and a skip there would hide a claim that was never checked.

What stays a plain skip, CI or not: what no CI machine of this project has (a GPU:
tests/system/test_gpu_checks.py), and a test written for the other case of a machine (one without CUDA).
"""

from __future__ import annotations

import functools
import os
import shutil

import pytest

#: What ``make system-deps`` installs, for the message of a missing part.
SYSTEM_DEPS = "make system-deps"


def in_ci() -> bool:
    """True when the run is CI's (``CI`` set to ``true`` or ``1``, as CI services set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def require(part: str, missing: str | None) -> None:
    """Go on when ``missing`` is None; otherwise skip, or fail under CI, naming ``part`` and why.

    ``missing`` is one sentence a maintainer can act on, e.g. ``"bwrap not found: make system-deps"``.
    """
    if missing is None:
        return
    if in_ci():
        pytest.fail(f"CI needs {part}, and it is missing: {missing}", pytrace=False)
    reason = f"{part} missing: {missing}"
    try:  # `-rs` lists the test's own file and line, not this one's (as for a skip mark)
        skip = pytest.skip.Exception(reason, allow_module_level=True, _use_item_location=True)
    except TypeError:  # a pytest without that keyword
        skip = pytest.skip.Exception(reason, allow_module_level=True)
    raise skip


def require_program(part: str, program: str, install: str = SYSTEM_DEPS) -> str:
    """The path of ``program`` on PATH; else :func:`require` says how to get it."""
    found = shutil.which(program)
    require(part, None if found else f"{program} not found on PATH ({install})")
    return found


def bubblewrap_missing() -> str | None:
    """Why the grading sandbox (bubblewrap) cannot start here, or None where it can.

    Probed, not assumed (course.grading.sandbox.choose_sandbox starts ``bwrap ... true``): bwrap may be
    installed and still refused its user namespaces (Ubuntu 24.04's AppArmor, a container's seccomp).
    """
    return probe_bubblewrap(shutil.which("bwrap"))


@functools.cache
def probe_bubblewrap(bwrap: str | None) -> str | None:
    """Why the grading sandbox cannot start with ``bwrap`` (None if it can): probed once per bwrap
    found, per process."""
    from course.grading.sandbox import choose_sandbox

    kind, why = choose_sandbox("auto")
    if kind == "bwrap":
        return None
    why = why.split("; UNSAFE")[0]
    return (f"{why}; `{SYSTEM_DEPS}` installs it, and on Ubuntu 24.04 it also needs "
            "`sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`")


def require_bubblewrap() -> None:
    """Skip (or under CI fail) where the grading sandbox cannot start."""
    require("bubblewrap", bubblewrap_missing())
