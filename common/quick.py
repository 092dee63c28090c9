"""Tiny configurations for the test run: ``make test`` runs every chapter quickly.

A chapter's stored outputs come from a full run (``make notebooks``): those are the figures its
prose quotes. ``make test`` checks that every cell still runs, on two cores, in a few minutes, so
it sets ``COMPANION_QUICK=1`` and the few expensive cells (a training of many epochs, a benchmark
of many repeats) choose a smaller size with ``sized(full, quick=...)``. Checks that only a full
run can pass (an accuracy after 24 epochs) are written ``assert is_quick_run() or ...``; every
other check holds in both.

Nothing else changes under the variable: the same functions, the same code paths, the same data,
but for one thing: ``common.ddp.launch.torchrun_command`` adds torchrun's own ``--start-method=fork
--run-path FILE`` and starts the agent as ``common.ddp.agent``, so that torchrun's agent imports torch,
torchvision and pandas once and forks its workers from itself instead of starting a Python per worker
(the same agent, rendezvous and restarts; a third of the CPU seconds of a tiny launch), and
``common.ddp.launch.run_command`` forks that agent itself from a fork server that imported them once per
notebook (``common.ddp.forking.run_forked``; chapter 4.2's cells 52 -> 32 CPU seconds). A learner's run,
and the stored outputs, start every agent and worker fresh.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")

#: The environment variable ``make test`` sets; any value but "" and "0" turns it on.
QUICK_ENV = "COMPANION_QUICK"


def is_quick_run() -> bool:
    """True when the notebook runs under ``make test`` (``COMPANION_QUICK`` set, not "0")."""
    return os.environ.get(QUICK_ENV, "") not in ("", "0")


def sized(full: T, *, quick: T) -> T:
    """``full`` in a normal run, ``quick`` under ``make test`` (``COMPANION_QUICK=1``).

    >>> sized(24, quick=3) in (24, 3)
    True
    """
    return quick if is_quick_run() else full
