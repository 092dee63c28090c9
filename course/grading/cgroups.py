"""Limits per exercise, host side: a cgroup of its own for each exercise, where the machine gives one.

Each exercise's checker is put into a fresh cgroup before it forks anything (the judge asks,
``judges`` places it and only then lets it go on), so the checker, the answer process and every
process they start share one memory limit (``/dev/shm``'s files included: tmpfs pages are charged
to the cgroup that wrote them) and one process limit. After the exercise the cgroup's counters say
whether a limit was hit, whatever is left in it is killed, and it is removed. cgroup v2 where the
grader's own cgroup can hand ``memory`` and ``pids`` to children (its ``cgroup.subtree_control``),
else cgroup v1's ``memory`` and ``pids`` hierarchies where they can be written (as root). Where
neither can be written (an ordinary user on cgroup v1), ``Cgroups.create`` returns None and the
per-process limits and the sandbox's tmpfs sizes are what is left. The threat model is in
``course/grading/__init__.py``.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROLLERS = ("memory", "pids")
#: Limit files per (controller, version): a value in bytes, or (pids) a count.
LIMIT_FILES = {("memory", 1): ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"),
               ("memory", 2): ("memory.max",), ("pids", 1): ("pids.max",), ("pids", 2): ("pids.max",)}
#: The counter that says a limit was hit: (file, field). v1's ``oom_kill`` needs Linux 4.13.
COUNTERS = {("memory", 1): ("memory.oom_control", "oom_kill"), ("memory", 2): ("memory.events", "oom_kill"),
            ("pids", 1): ("pids.events", "max"), ("pids", 2): ("pids.events", "max")}
_names = itertools.count()


def _mounts() -> tuple[dict[str, Path], Path | None]:
    """cgroup v1 mount point per controller, and the cgroup v2 mount point (from mountinfo)."""
    v1: dict[str, Path] = {}
    v2 = None
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            left, _, right = line.partition(" - ")
            kind = right.split()
            if not kind:
                continue
            mount = Path(left.split()[4].replace("\\040", " "))
            if kind[0] == "cgroup2":
                v2 = mount
            elif kind[0] == "cgroup" and len(kind) > 2:
                v1.update({c: mount for c in CONTROLLERS if c in kind[2].split(",")})
    return v1, v2


def _own(line_of: str) -> Path:
    """This process's cgroup path in one hierarchy (``/proc/self/cgroup``): ``""`` is v2's line."""
    with open("/proc/self/cgroup", encoding="utf-8") as own:
        for line in own:
            _, names, path = line.rstrip("\n").split(":", 2)
            if (names == "" and line_of == "") or line_of in names.split(","):
                return Path(path.lstrip("/"))
    raise OSError(f"this process is in no cgroup of {line_of or 'v2'}")


def _v2_root(mount: Path, name: str) -> Path:
    """A folder for one judge below the grader's v2 cgroup, handing memory and pids to its children."""
    own = mount / _own("")
    if not set(CONTROLLERS) <= set((own / "cgroup.controllers").read_text().split()):
        raise OSError(f"{own} offers no memory and pids controllers")
    (own / "cgroup.subtree_control").write_text("+memory +pids")  # EBUSY if it holds processes
    root = own / name
    root.mkdir()
    try:
        (root / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError:
        root.rmdir()
        raise
    return root


def _roots(name: str) -> dict[str, tuple[int, Path]]:
    """controller -> (version, this judge's folder); empty where none can be made."""
    v1, v2 = _mounts()
    if v2 is not None:
        try:
            root = _v2_root(v2, name)
            return {c: (2, root) for c in CONTROLLERS}
        except OSError:
            pass
    roots: dict[str, tuple[int, Path]] = {}
    for controller, mount in v1.items():
        try:
            folder = mount / _own(controller) / name
            folder.mkdir(exist_ok=True)  # memory and pids may share one mount
            roots[controller] = (1, folder)
        except OSError:
            continue
    return roots


def _counter(folder: Path, controller: str, version: int) -> int:
    name, key = COUNTERS[(controller, version)]
    try:
        lines = (folder / name).read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.split()[:1] == [key]), 0)


def _empty(folder: Path) -> None:
    """Kill every process left in ``folder`` and remove it (a few tries: dying processes leave late)."""
    for _ in range(200):
        try:
            pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            folder.rmdir()
            return
        except OSError:
            time.sleep(0.01)
    raise OSError(f"cannot remove the exercise's cgroup {folder}: processes are left in it")


@dataclass
class Cgroups:
    """The cgroups of one judge: a folder per hierarchy, and a fresh child in each per exercise."""

    roots: dict[str, tuple[int, Path]]
    memory_mb: int
    processes: int
    current: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def create(cls, memory_mb: int, processes: int) -> Cgroups | None:
        """The cgroups of a new judge, or None where this machine gives none to this user."""
        try:
            roots = _roots(f"grading-{os.getpid()}-{next(_names)}")
        except OSError:
            return None
        return cls(roots, memory_mb, processes) if roots else None

    def _values(self, controller: str) -> str:
        # the checker and the answer process are the grader's own: the student's count starts after them
        return str(self.memory_mb * 2**20 if controller == "memory" else self.processes + 2)

    def begin(self, key: str) -> None:
        """A cgroup for the next exercise, its limits written."""
        for controller, (version, root) in self.roots.items():
            folder = root / f"exercise-{key}"
            folder.mkdir(exist_ok=True)  # v2: one folder for both controllers
            self.current[controller] = folder
            for name in LIMIT_FILES[(controller, version)]:
                if (folder / name).exists():
                    (folder / name).write_text(self._values(controller))
            if controller == "memory" and version == 2 and (folder / "memory.swap.max").exists():
                (folder / "memory.swap.max").write_text("0")

    def place(self, pid: int) -> None:
        """Put the process ``pid`` (as the host sees it) into the exercise's cgroups."""
        for folder in sorted(set(self.current.values())):
            (folder / "cgroup.procs").write_text(str(pid))

    def end(self) -> str | None:
        """Remove the exercise's cgroups (killing what is left); the limit it hit, named, if any."""
        hits = []
        for controller, folder in self.current.items():
            version = self.roots[controller][0]
            if _counter(folder, controller, version):
                hits.append(f"the memory limit of {self.memory_mb} MiB for the exercise was reached"
                            if controller == "memory" else
                            f"the process limit of {self.processes} for the exercise was reached")
        for folder in sorted(set(self.current.values())):
            _empty(folder)
        self.current = {}
        return "; ".join(hits) or None

    def remove(self) -> None:
        """Remove this judge's folders (an exercise's first, if one is left)."""
        if self.current:
            self.end()
        for _, root in set(self.roots.values()):
            try:
                for child in root.iterdir():
                    if child.is_dir():
                        _empty(child)
                root.rmdir()
            except OSError:
                pass


def available() -> list[str]:
    """The controllers an exercise's cgroups get on this machine, for this user (a probe, removed)."""
    probe = Cgroups.create(1, 1)
    if probe is None:
        return []
    probe.remove()
    return sorted(probe.roots)
