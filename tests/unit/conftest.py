"""The unit tier (`make check`): tests that start no process, so the edit loop stays fast.

Every test in this folder runs with process creation refused: ``subprocess`` (and everything built on
it), ``os.fork``/``posix_spawn``/``system``/``spawn*``, ``pty.fork`` and ``multiprocessing`` (DataLoader
workers included) raise ``ProcessStarted``. A test that needs a process belongs in ``tests/system/``;
the guard holds in ``make test`` too, so the tier cannot rot.
"""

from __future__ import annotations

import multiprocessing.process
import os
import pty
import subprocess

import jupytext  # noqa: F401 - see below
import matplotlib.font_manager  # noqa: F401
import pytest
import torch  # noqa: F401

# Imported before the guard, once per process: torch's first import runs `ldconfig` (through
# ctypes.util.find_library), matplotlib's first font lookup may run `fc-list` and jupytext's import
# asks `pandoc` for its version. Those are libraries starting processes on their own, not the tests.


class ProcessStarted(RuntimeError):
    """A unit test tried to start a process."""


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise ProcessStarted(f"tests/unit starts no process ({what} was called): move this test to "
                             "tests/system/ (see CONTRIBUTING.md, 'Two tiers')")
    return refuse


#: (object, attribute, what to call it in the message)
GUARDED = [(subprocess.Popen, "__init__", "subprocess.Popen"), (os, "fork", "os.fork"),
           (os, "forkpty", "os.forkpty"), (os, "posix_spawn", "os.posix_spawn"),
           (os, "posix_spawnp", "os.posix_spawnp"), (os, "system", "os.system"),
           (os, "spawnv", "os.spawnv"), (os, "spawnve", "os.spawnve"), (os, "execv", "os.execv"),
           (os, "execve", "os.execve"), (pty, "fork", "pty.fork"),
           (multiprocessing.process.BaseProcess, "start", "multiprocessing start")]


@pytest.fixture(autouse=True)
def no_processes(monkeypatch):
    """Refuse every way of starting a process for the duration of one unit test."""
    for owner, name, what in GUARDED:
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, _refuse(what))
    yield
