"""Finding the rank that hangs a job: a stack dump of every rank, and reading the dumps.

A hung collective looks the same from every rank that waits in it; the rank that is *not*
waiting is the one to look at. Each rank arms ``arm_stack_dump`` once, after
``init_process_group``: its Python stack goes to ``<folder>/rank<R>.stack`` when it receives
``SIGUSR1`` (``kill -USR1 <pid>``; its pid is in ``rank<R>.pid``), or by itself after
``after_s`` seconds (a watchdog that ``disarm_stack_dump`` cancels). From outside the job,
``signal_ranks`` sends the signal to every rank, ``read_stacks`` waits for the dumps, and
``hung_ranks`` names the ranks outside ``torch.distributed`` and autograd with the line each
one is at. Only the Python standard library's ``faulthandler`` is involved: it writes from the
signal handler itself, so a rank blocked inside C++ (a gloo or NCCL wait) still answers.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from common.paths import display_path

#: Frames in these parts of torch mean "waiting for the other ranks": the collectives, and
#: the backward pass, in which DDP all-reduces the gradients.
WAITING = ("torch/distributed/", "torch/autograd/", "torch/_tensor.py")
_THREAD = re.compile(r"^(?:Current thread|Thread) (?P<id>0x[0-9a-f]+) .*\(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(?P<file>.+)", line (?P<line>\d+) in (?P<function>.+)$')
#: Folders of the interpreter and its packages (and any ``site-packages``, another
#: machine's included): frames there are not the job's own code.
_LIBRARY = tuple({sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib",
                                                        "platlib")})


def stack_file(folder: Path, rank: int) -> Path:
    """Where rank ``rank`` writes its stack dumps.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return Path(folder) / f"rank{rank}.stack"


def pid_file(folder: Path, rank: int) -> Path:
    """Where rank ``rank`` writes its process id, for ``signal_ranks``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return Path(folder) / f"rank{rank}.pid"


def arm_stack_dump(folder: Path, rank: int, *, after_s: float | None = None) -> TextIO:
    """In a rank: dump every thread's Python stack to ``stack_file`` on ``SIGUSR1``, and
    also after ``after_s`` seconds unless ``disarm_stack_dump`` comes first.

    The file stays open for the life of the process (``faulthandler`` writes to its
    descriptor from the signal handler); each dump is appended. Where there is no
    ``SIGUSR1`` (Windows) only the watchdog works.

    Returns:
        The open dump file (keep a reference; closing it ends the dumps).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if after_s is not None and not after_s > 0:
        raise ValueError(f"after_s must be a positive number of seconds, not {after_s!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dump = stack_file(folder, rank).open("a", encoding="utf-8")
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    if after_s is not None:
        faulthandler.dump_traceback_later(after_s, file=dump)
    written = pid_file(folder, rank).with_suffix(".pid.tmp")
    written.write_text(f"{os.getpid()}\n", encoding="utf-8")
    os.replace(written, pid_file(folder, rank))  # whole or absent: a reader never sees half a pid
    return dump


def disarm_stack_dump() -> None:
    """Cancel the watchdog of ``arm_stack_dump`` (the step finished in time).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    faulthandler.cancel_dump_traceback_later()


def _wait_for(paths: dict[int, Path], ready, what: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        missing = [rank for rank, path in paths.items() if not (path.is_file() and ready(path))]
        if not missing:
            return
        if time.monotonic() > deadline:
            names = ", ".join(display_path(paths[rank]) for rank in missing)
            raise TimeoutError(f"rank(s) {missing} wrote no {what} within {wait_s:g} s: {names}")
        time.sleep(0.05)


def signal_ranks(folder: Path, world_size: int, *, wait_s: float = 30.0) -> dict[int, int]:
    """From outside the job: send ``SIGUSR1`` to every rank that armed ``arm_stack_dump``.

    Waits up to ``wait_s`` seconds for all ``world_size`` pid files first.

    Returns:
        ``{rank: pid}`` of the ranks signalled.

    Raises:
        TimeoutError: Naming the ranks whose pid file never appeared.
        ProcessLookupError: If a rank's process is gone.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    files = {rank: pid_file(folder, rank) for rank in range(world_size)}
    _wait_for(files, lambda path: path.read_text(encoding="utf-8").strip().isdigit(),
              "pid file", wait_s)
    pids = {rank: int(path.read_text(encoding="utf-8")) for rank, path in files.items()}
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR1)
    return pids


def read_stacks(folder: Path, world_size: int, *, wait_s: float = 10.0) -> dict[int, str]:
    """Every rank's stack dumps, waiting up to ``wait_s`` seconds for each to be written.

    Raises:
        TimeoutError: Naming the ranks that wrote no dump.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    files = {rank: stack_file(folder, rank) for rank in range(world_size)}
    _wait_for(files, lambda path: bool(parse_stack(path.read_text(encoding="utf-8"))),
              "stack dump", wait_s)
    return {rank: path.read_text(encoding="utf-8") for rank, path in files.items()}


@dataclass(frozen=True)
class Frame:
    """One line of a Python stack: file, line number and function.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    file: str
    line: int
    function: str

    @property
    def waiting(self) -> bool:
        """Inside torch's collectives or backward pass, i.e. waiting for other ranks."""
        return any(part in self.file.replace(os.sep, "/") for part in WAITING)

    @property
    def own(self) -> bool:
        """The job's own code: outside the interpreter's and its packages' folders."""
        file = self.file.replace(os.sep, "/")
        return not (file.startswith(_LIBRARY) or file.startswith("<")
                    or "/site-packages/" in file or "/dist-packages/" in file)

    def __str__(self) -> str:
        return f"{display_path(self.file)}:{self.line} in {self.function}"


def parse_stack(text: str) -> list[Frame]:
    """The main thread's frames in the *last* dump of ``text``, innermost first.

    A file may hold several dumps (one per signal): a new one begins where a thread shows up
    a second time. The main thread is the one whose outermost frame is a module
    (``<module>``, or ``runpy`` for ``python -m``); a dump of one thread is that thread.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    dumps: list[dict[str, list[Frame]]] = []
    frames: list[Frame] | None = None
    for line in text.splitlines():
        if thread := _THREAD.match(line.strip()):
            if not dumps or thread["id"] in dumps[-1]:
                dumps.append({})
            frames = dumps[-1].setdefault(thread["id"], [])
        elif (frame := _FRAME.match(line)) and frames is not None:
            frames.append(Frame(frame["file"], int(frame["line"]), frame["function"]))
    threads = [t for t in (dumps[-1].values() if dumps else []) if t]
    main = [t for t in threads if t[-1].function == "<module>" or "runpy" in t[-1].file]
    return (main or threads or [[]])[0]


@dataclass(frozen=True)
class RankStack:
    """Where one rank is: waiting for the others or not, and the line of its own code.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    rank: int
    waiting: bool
    at: Frame | None
    frames: tuple[Frame, ...]


def rank_stacks(stacks: dict[int, str]) -> dict[int, RankStack]:
    """Each rank's state, from the dumps ``read_stacks`` returned.

    Raises:
        ValueError: Naming a rank whose dump holds no Python frame.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    states = {}
    for rank, text in sorted(stacks.items()):
        frames = parse_stack(text)
        if not frames:
            raise ValueError(f"rank {rank}: its stack dump holds no Python frame")
        own = next((frame for frame in frames if frame.own), None)
        states[rank] = RankStack(rank, any(frame.waiting for frame in frames), own,
                                 tuple(frames))
    return states


def hung_ranks(stacks: dict[int, str]) -> dict[int, Frame | None]:
    """The ranks that are not waiting in a collective, with the line each one is at.

    Empty when every rank waits in a collective: then compare their lines instead (ranks
    in different collectives, or in the same one with different shapes, are a mismatch:
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` names it).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {rank: state.at for rank, state in rank_stacks(stacks).items() if not state.waiting}
