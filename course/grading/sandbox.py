"""Contain untrusted notebook code, host side: bubblewrap, setpriv, a file guard, uids of its own.

``choose_sandbox`` decides whether bubblewrap works on this machine; ``bwrap_prefix`` is the
command line that makes the whole machine read-only except one working copy, hides chosen
folders (putting chosen parts back read-only) and gives the code no network and no view of other
processes; ``setpriv_prefix`` sets the judge's privileges on its command line. ``FileGuard``
snapshots files (bytes and sha256, new files included) so that any change made by the code
can be reported and undone. As root, ``judge_uid`` hands each judge a uid nobody else uses and
``kill_uid`` ends all its processes. ``judges`` uses them; the threat model is in
``course/grading/__init__.py``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import psutil

#: Folders the file guard does not watch: version control internals, environments, data and outputs.
UNWATCHED = frozenset({".git", ".venv", "venv", "data", "build", "runs", "node_modules", "__pycache__",
                       ".ipynb_checkpoints", ".pytest_cache", ".ruff_cache"})


class FileGuard:
    """Remembers files (bytes and sha256) so that any change can be reported and undone.

    ``roots`` are ``(folder, patterns)`` or ``(folder, patterns, max_depth)``; folders named in
    ``UNWATCHED`` (and ``skip``) are not entered. A created file matching a pattern is a change.
    """

    def __init__(self, roots: list[tuple], skip: tuple[Path, ...] = ()) -> None:
        self.roots = [(Path(r[0]), tuple(r[1]), r[2] if len(r) > 2 else None) for r in roots]
        self.skip = {Path(p).resolve() for p in skip}
        # only regular files are read: a FIFO (a submission named like a notebook) would block
        self.saved = {path: path.read_bytes() for path in self._listing() if _regular(path)}
        self.hashes = {path: hashlib.sha256(data).hexdigest() for path, data in self.saved.items()}
        self.others = {path for path in self._listing() if path not in self.saved}

    def _listing(self) -> list[Path]:
        found: set[Path] = set()
        for root, patterns, max_depth in self.roots:
            for folder, dirs, names in os.walk(root):
                here = Path(folder)
                depth = len(here.relative_to(root).parts)
                dirs[:] = [d for d in dirs if d not in UNWATCHED and (here / d).resolve() not in self.skip
                           and (max_depth is None or depth < max_depth)]
                found.update(here / n for n in names
                             if any(fnmatch.fnmatch(n, p) for p in patterns) and not (here / n).is_symlink())
        return sorted(found)

    def changes(self) -> list[str]:
        """Describe every file modified, deleted or created since the snapshot."""
        now = set(self._listing())
        found = [f"deleted {p}" for p in self.saved if p not in now]
        found += [f"created {p}" for p in sorted(now - set(self.saved) - self.others)]
        found += [f"modified {p}" for p in self.saved if p in now
                  and (not _regular(p) or hashlib.sha256(p.read_bytes()).hexdigest() != self.hashes[p])]
        return found

    def restore(self) -> None:
        """Put every remembered file back and remove files created since."""
        for path in set(self._listing()) - set(self.saved) - self.others:
            path.unlink()
        for path, data in self.saved.items():
            if not _regular(path) or hashlib.sha256(path.read_bytes()).hexdigest() != self.hashes[path]:
                if path.exists() and not _regular(path):
                    path.unlink()
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)


def _regular(path: Path) -> bool:
    """A regular file (not a link, FIFO, socket or device): the only kind read."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def bwrap_prefix(workdir: Path, hidden: list[Path], exposed: list[Path] = (),
                 shm_mb: int | None = None) -> list[str]:
    """The bubblewrap command line: everything read-only, ``workdir`` writable, ``hidden`` empty.

    ``exposed`` are put back read-only inside hidden folders (e.g. ``common/`` inside the hidden
    repository). No network (a namespace of its own with only loopback), no view of other
    processes, and every process ends with the sandbox. ``/dev/shm`` is a tmpfs of its own, of
    at most ``shm_mb`` MiB: its files are memory that no process's limit counts.
    """
    # /dev/shm writable by the judge's own uid: DataLoader workers pass batches through it.
    size = ["--size", str(shm_mb * 2**20)] if shm_mb else []
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--perms", "1777", *size, "--tmpfs", "/dev/shm"]
    for path in hidden:
        args += ["--tmpfs", str(path)]
    made: set[Path] = set()
    for path in exposed:
        # bubblewrap would make the folders leading to a mount point 0700: others could not pass.
        for parent in reversed(Path(path).parents):
            if parent not in made and any(parent.is_relative_to(h) and parent != Path(h) for h in hidden):
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        args += ["--ro-bind", str(path), str(path)]
    if os.geteuid() != 0:  # root keeps its uid to hand each judge a uid of its own
        args.append("--unshare-user")
    return args + ["--bind", str(workdir), str(workdir), "--unshare-pid", "--unshare-ipc",
                   "--unshare-net", "--unshare-uts", "--die-with-parent", "--new-session",
                   "--chdir", str(workdir), "--"]


def setpriv_prefix(uid: int | None) -> list[str]:
    """The judge's privileges, set on its command line: never new privileges (no setuid program
    gives any back); as root, ``uid`` (its own) or, with none, uid 0 without any capability.

    Raises:
        RuntimeError: ``setpriv`` (util-linux) is not installed.
    """
    if shutil.which("setpriv") is None:
        raise RuntimeError("setpriv not found (it is part of util-linux): the judge's privileges are set with it")
    args = ["setpriv", "--no-new-privs"]
    if os.geteuid() == 0:
        if uid is not None:
            args += ["--reuid", str(uid), "--regid", str(uid), "--clear-groups"]
        args += ["--inh-caps=-all", "--bounding-set=-all"]
    return [*args, "--"]


def choose_sandbox(mode: str) -> tuple[str, str]:
    """Return ``("bwrap" | "none", why)``: bwrap if asked or if ``auto`` and a probe works.
    """
    if mode == "none":
        return "none", ("sandbox disabled (--sandbox none); UNSAFE FOR UNTRUSTED SUBMISSIONS: no network, "
                        "file or report isolation; the repository's files are hashed and restored, strays killed")
    if shutil.which("bwrap") is None:
        why = "bwrap not found (apt-get install bubblewrap)"
    else:
        with tempfile.TemporaryDirectory() as probe:
            command = [*bwrap_prefix(Path(probe), []), "true"]
            done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode == 0:
            return "bwrap", ("bubblewrap: read-only machine, no network, repository and submissions hidden, "
                              "writable working copy")
        why = f"bwrap does not work here: {done.stderr.strip()[:200]}"
    if mode == "bwrap":
        raise RuntimeError(why)
    return "none", (why + "; UNSAFE FOR UNTRUSTED SUBMISSIONS: running without a sandbox (no network "
                     "or file isolation); files are hashed and restored, strays killed")


_uids = itertools.count()


def judge_uid() -> int | None:
    """A uid no other process uses, for one judge and its exercises, when running as root; else None.

    A uid of its own makes the process-count limit hold (root is exempt), keeps the judge from
    signalling or writing anything of the grader's, and lets ``kill_uid`` find every stray.
    """
    if os.geteuid() != 0:
        return None
    return 1_500_000_000 + (os.getpid() % 100_000) * 100 + next(_uids) % 100


def kill_uid(uid: int) -> None:
    """SIGKILL every process whose real uid is ``uid`` until none is left."""
    for _ in range(1000):
        found = [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def readable_by_others(path: Path) -> bool:
    """True if a user other than the owner can reach ``path`` (every parent searchable, it readable)."""
    path = Path(path).resolve()
    if not path.exists() or not path.stat().st_mode & 0o004:
        return False
    return all(parent.stat().st_mode & 0o001 for parent in path.parents)
