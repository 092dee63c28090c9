"""Timings as a lesson prints them: the figure, the machine it ran on, and one sentence that reads it.

A speed-up or a data-wait fraction depends on the machine and on what else it is doing, so a
chapter never asserts one: a learner's busy laptop must not fail a cell. It prints a *reading*
instead::

    [figure 03_1/cache-vs-guide] 28.5× — the uint8 cache against the guide's pipeline
      expected ≥ 3× on 2 free cores; here 28.5× on 2 cores at load average 0.4: as expected.

The first line has a fixed shape, ``[figure KEY] VALUE UNIT — WHAT``, so that two commands can read
the stored outputs: ``make figures`` writes docs/figures.md's chapter rows from them and ``make
lessons`` runs the timing chapters and puts each figure beside its promise.

Introduced in chapters/02_1_dataset_dataloader.ipynb.
"""

from __future__ import annotations

import operator
import os
import re
from dataclasses import dataclass

#: The comparisons a promise may use, as the reading prints them.
_COMPARE = {">=": (operator.ge, "≥"), "<=": (operator.le, "≤"), ">": (operator.gt, ">"),
            "<": (operator.lt, "<")}

#: What the first line of a reading looks like (``make figures`` and ``make lessons`` parse it).
FIGURE_LINE = re.compile(r"^\[figure (?P<key>[\w./-]+)\] (?P<value>-?[\d.,]+)(?P<unit>.*?) — (?P<what>.+)$")
#: What the second line says of the machine.
MACHINE_PART = re.compile(r"on (?P<cores>\d+) cores? at load average (?P<load>\d+(?:\.\d+)?|unknown)")


@dataclass(frozen=True)
class Machine:
    """The cores this process may use and the 1-minute load average (``None`` where unknown).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """

    cores: int
    load: float | None

    def describe(self) -> str:
        load = "unknown" if self.load is None else f"{self.load:.1f}"
        return f"{self.cores} {'core' if self.cores == 1 else 'cores'} at load average {load}"

    @property
    def busy(self) -> bool:
        """More runnable work than cores: timings are then slower and noisier than on a quiet machine."""
        return self.load is not None and self.load > self.cores


def machine_state() -> Machine:
    """This machine now: the cores this process may run on and the 1-minute load average.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has no load average
        load = None
    return Machine(cores=cores, load=load)


@dataclass(frozen=True)
class Reading:
    """A measured figure with its promise and the machine it was measured on.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """

    key: str
    value: float
    unit: str
    what: str
    expect: tuple[str, float] | None
    machine: Machine

    @property
    def as_expected(self) -> bool | None:
        """Whether the figure keeps its promise (``None`` for a figure that promises nothing)."""
        if self.expect is None:
            return None
        compare, _ = _COMPARE[self.expect[0]]
        return bool(compare(self.value, self.expect[1]))

    def __str__(self) -> str:
        figure = f"{_number(self.value)}{self.unit}"
        here = f"here {figure} on {self.machine.describe()}"
        if self.expect is None:
            second = f"{here[0].upper()}{here[1:]}."
        else:
            sign = _COMPARE[self.expect[0]][1]
            promise = f"expected {sign} {_number(self.expect[1])}{self.unit} on a quiet machine"
            second = f"{promise}; {here}: {self._verdict()}."
        return f"[figure {self.key}] {figure} — {self.what}\n  {second}"

    def _verdict(self) -> str:
        if self.as_expected:
            return "as expected"
        if self.machine.busy:
            return "short of it, on a busy machine (other work competes for the cores)"
        return "short of it on this machine"


def _number(value: float) -> str:
    """A figure as the readings print it: 3 significant digits (2 below 1), trailing zeros kept."""
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:#.3g}" if abs(value) >= 1 else f"{value:#.2g}"


def read_figure(key: str, value: float, *, unit: str, what: str,
                expect: tuple[str, float] | None = None, machine: Machine | None = None) -> Reading:
    """Print (and return) a measured figure, the machine it ran on and whether it kept its promise.

    ``key`` names the figure (``"03_1/cache-vs-guide"``: notebook, then a short name), ``unit`` is
    written right after the number (``"×"``, ``" ms"``, ``" images/s"``), ``expect`` a promise such as
    ``(">=", 3.0)``. Never asserts: a busy machine gives a slower figure, and the reading says so.
    ``machine`` is the machine as :func:`machine_state` saw it before the measurement (default: now);
    pass it for a measurement that itself runs more processes than there are cores, whose own work
    would otherwise count as other programs' load.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    if expect is not None and expect[0] not in _COMPARE:
        raise ValueError(f"expect={expect!r}: the comparison must be one of {sorted(_COMPARE)}")
    if not re.fullmatch(r"[\w./-]+", key):
        raise ValueError(f"figure key {key!r}: letters, digits and . / _ - only")
    reading = Reading(key=key, value=float(value), unit=unit, what=what, expect=expect,
                      machine=machine or machine_state())
    print(reading)
    return reading
