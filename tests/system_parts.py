"""Tests that need a part of the system (bubblewrap, Chromium, Slurm, root for network namespaces).

Where such a part is missing, the test skips with one line saying what is missing and how to get it;
under CI (``CI=true``, as ``.ci/run`` runs) the same test fails instead, since CI installs every part
(``make system-deps``) and a skip there would hide a claim that was never checked.
"""

from __future__ import annotations

import os

import pytest


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
    pytest.skip(f"{part} missing: {missing}")
