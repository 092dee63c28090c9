"""A uid of its own for each judge, host side: as root a fresh one, as an ordinary user a subordinate one.

As root, ``judge_uid`` hands each judge a uid nobody else uses (``setpriv`` drops to it inside the
sandbox). An ordinary user cannot take another uid, but the setuid helpers of the ``uidmap`` package
(``newuidmap``, ``newgidmap``) map into a user namespace the ranges that ``/etc/subuid`` and
``/etc/subgid`` give the user. Each judge then starts as::

    unshare --user --map-root-user --map-users=S,J,1 --map-groups=T,J,1 -- bwrap ... -- setpriv --reuid J ...

The instructor's uid is the namespace's root: it builds the sandbox (bubblewrap, with no user
namespace of its own, binds the venv and ``common/`` even below a home no one else may enter), and
``setpriv`` then runs the judge as ``J`` (``SANDBOX_UID``), which the kernel sees as the subordinate
uid ``S`` that owns nothing: the instructor's files are the namespace root's, their 0600 files
unreadable; the judge's files in its ``/tmp`` are its own. Where the helpers or the ranges are
missing, or a probe fails, ``choose_subordinate`` says so (``SHARED``) and the judges run as the
instructor, as before. ``kill_uid`` ends every process of a judge's uid. The threat model is in
``course/grading/__init__.py``.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from course.grading.sandbox import SANDBOX_UID, bwrap_prefix, setpriv_prefix

SUBUID = Path("/etc/subuid")
SUBGID = Path("/etc/subgid")
#: The one-time setup that gives an ordinary user's judges a uid of their own.
SETUP = ("install uidmap and add a range to /etc/subuid and /etc/subgid to give judges a uid of their own "
         "(sudo apt-get install uidmap; sudo usermod --add-subuids 100000-165535 --add-subgids "
         "100000-165535 $USER; see docs/instructors.md)")
#: What the report says without them.
SHARED = "ordinary user without subordinate uids: files are kept away by the allow-list only; " + SETUP
#: What it says with them.
OWN = ("a uid of its own for each judge (one of your subordinate uids: your files are the namespace "
       "root's, your 0600 files unreadable)")
#: Run by the probe under a judge's uid: what every judge reads first.
_READ = "import sys\nfor path in sys.argv[1:]:\n    open(path, 'rb').close()"
_uids = itertools.count()


def ranges(path: Path, names: set[str]) -> list[tuple[int, int]]:
    """``(start, count)`` of every row of a subordinate-id file (``NAME:START:COUNT``) for ``names``.

    Raises:
        ValueError: A row is not ``NAME:START:COUNT``, naming the file and the row.
    """
    if not path.exists():
        return []
    found = []
    for row, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.strip().split(":")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            raise ValueError(f"{path} row {row}: expected NAME:START:COUNT, found {line.strip()!r}")
        if parts[0] in names and int(parts[2]) > 0:
            found.append((int(parts[1]), int(parts[2])))
    return found


@dataclass(frozen=True)
class Subordinate:
    """One range of the user's subordinate uids and one of gids."""

    uid_start: int
    uid_count: int
    gid_start: int
    gid_count: int

    def ids(self, n: int) -> tuple[int, int]:
        """The host uid and gid of the ``n``-th judge (each judge its own, within the ranges)."""
        return self.uid_start + n % self.uid_count, self.gid_start + n % self.gid_count


def find_subordinate(uid: int, files: tuple[Path, Path] = (SUBUID, SUBGID)) -> tuple[Subordinate | None, str]:
    """The first subordinate uid and gid ranges of ``uid`` (by name or number), or None and why not.

    Raises:
        ValueError: A row of ``files`` is malformed (naming the file and row).
    """
    missing = [tool for tool in ("newuidmap", "newgidmap") if shutil.which(tool) is None]
    if missing:
        return None, f"{' and '.join(missing)} not found"
    try:
        names = {pwd.getpwuid(uid).pw_name, str(uid)}
    except KeyError:
        names = {str(uid)}
    uids, gids = ranges(files[0], names), ranges(files[1], names)
    if not uids or not gids:
        return None, f"no range for uid {uid} in {files[0] if not uids else files[1]}"
    return Subordinate(*uids[0], *gids[0]), ""


def userns_prefix(host_uid: int, host_gid: int, inner: int) -> list[str]:
    """A user namespace whose root is the caller and whose ``inner`` is ``host_uid``/``host_gid``
    (``unshare`` of util-linux 2.38+, which calls ``newuidmap``/``newgidmap``)."""
    return ["unshare", "--user", "--map-root-user", f"--map-users={host_uid},{inner},1",
            f"--map-groups={host_gid},{inner},1", "--"]


@dataclass(frozen=True)
class JudgeUid:
    """One judge's uid: ``inner`` is what it runs as (``setpriv --reuid``; the judge checks it),
    ``host`` what the kernel checks files and signals against (``kill_uid``); ``userns`` the command
    that maps ``inner`` to ``host`` (empty as root, where they are the same)."""

    inner: int
    host: int
    userns: tuple[str, ...] = ()


def judge_uid(subordinate: Subordinate | None = None) -> JudgeUid | None:
    """A uid no other process uses, for one judge and its exercises: one of ``subordinate``'s, else as
    root a fresh one; None for an ordinary user without subordinate uids.

    A uid of its own makes the process-count limit hold (root is exempt), keeps the judge from
    signalling or writing anything of the grader's, and lets ``kill_uid`` find every stray.
    """
    n = (os.getpid() % 100_000) * 100 + next(_uids) % 100
    if subordinate is not None:
        host_uid, host_gid = subordinate.ids(n)
        return JudgeUid(SANDBOX_UID, host_uid, tuple(userns_prefix(host_uid, host_gid, SANDBOX_UID)))
    if os.geteuid() != 0:
        return None
    return JudgeUid(1_500_000_000 + n, 1_500_000_000 + n)


def _probe(subordinate: Subordinate, readable: list[Path], needed: list[Path]) -> str | None:
    """Why a judge under a subordinate uid cannot start and read ``needed`` here; None if it can."""
    uid = judge_uid(subordinate)
    command = [*uid.userns, *bwrap_prefix(readable, work_mb=1, shm_mb=1, mapped=True),
               *setpriv_prefix(uid.inner), sys.executable, "-s", "-c", _READ, *map(str, needed)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"a judge under subordinate uid {uid.host} did not start: {error}"
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1][:200]
    return (f"a judge under subordinate uid {uid.host} did not start or read what it needs ({last}); "
            "the venv, the Python installation and the repository's common/ must be readable by others")


def choose_subordinate(readable: list[Path], needed: list[Path]) -> tuple[Subordinate | None, str]:
    """For an ordinary user's sandboxed grader: the subordinate ids its judges run under (probed with
    the sandbox's ``readable`` folders and the files every judge reads, ``needed``), and the sentence
    for the report; ``(None, SHARED + why)`` where there are none or they do not work here."""
    try:
        subordinate, why = find_subordinate(os.getuid())
    except ValueError as error:
        subordinate, why = None, str(error)
    if subordinate is not None:
        why = _probe(subordinate, readable, needed) or ""
    if why:
        return None, f"{SHARED} ({why})"
    return subordinate, OWN


def kill_uid(uid: int) -> None:
    """SIGKILL every process whose real uid is ``uid`` (as the host sees it) until none is left."""
    for _ in range(1000):
        found = [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
