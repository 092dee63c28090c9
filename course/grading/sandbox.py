"""Contain untrusted notebook code, host side: bubblewrap, setpriv and a file guard.

``choose_sandbox`` decides whether bubblewrap works on this machine; ``bwrap_prefix`` is the
command line of a sandbox built from an allow-list (the system's library folders, the interpreter,
``common/`` and what runs inside, read-only; a size-capped working copy and ``/dev/shm``; nothing
else), with no network and no view of other processes; ``setpriv_prefix`` sets the judge's
privileges on its command line. ``FileGuard``
snapshots files (bytes and sha256, new files included) so that any change made by the code
can be reported and undone. The uid each judge runs under is chosen in ``uids``; ``judges``
uses them all; the threat model is in ``course/grading/__init__.py``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

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


#: System folders the interpreter and its libraries need, read-only where they exist; a link (``/lib ->
#: usr/lib`` on a merged-/usr system) is made again as the same link.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
#: What of ``/etc`` they need: the dynamic linker's cache (libraries in multiarch folders), name
#: resolution of ``localhost`` (torch.distributed's rendezvous), the time zone, fonts, ``alternatives``
#: links. No ``passwd``: the user of the sandbox is named by ``USER``, and HOME is set.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "hosts", "nsswitch.conf", "host.conf", "gai.conf",
       "localtime", "fonts", "alternatives")
#: The working copy inside the sandbox, and its private ``/tmp``: a tmpfs of its own holding HOME
#: (``home``), ``tmp`` (``TMPDIR``) and ``data``; everything an exercise may write lands on it, so its
#: size is a disk limit. Allowed folders that lie below ``/tmp`` on the host are bound onto it, read-only.
WORKDIR = Path("/tmp")
#: The uid inside the sandbox when the grader is not root: with subordinate uids, the judge's uid in the
#: namespace ``uids.userns_prefix`` makes (a subordinate uid on the host); without, bubblewrap's user
#: namespace maps it to the grader's uid (the kernel still checks files against that uid, so what is
#: not mounted is the protection).
SANDBOX_UID = 1_499_999_999


def _parents(path: Path, made: set[Path], bound: list[Path]) -> list[str]:
    """``--dir`` for each folder leading to ``path`` (0755: bubblewrap would make them 0700)."""
    args = []
    for parent in reversed(path.parents):
        if parent != Path("/") and parent not in made and not any(parent.is_relative_to(b) for b in bound):
            args += ["--perms", "0755", "--dir", str(parent)]
            made.add(parent)
    return args


def _binds(readable: list[Path]) -> list[str]:
    """Read-only binds of the system folders, ``/etc``'s pieces and ``readable`` (each once)."""
    args: list[str] = []
    bound: list[Path] = []
    made: set[Path] = set()
    etc = [Path("/etc", name) for name in ETC]
    for path in [*map(Path, SYSTEM), *etc, *sorted({Path(p) for p in readable})]:
        if any(path.is_relative_to(b) for b in bound) or not (path.exists() or path.is_symlink()):
            continue
        args += _parents(path, made, bound)
        if path.is_symlink() and path.parent == Path("/"):
            args += ["--symlink", os.readlink(path), str(path)]
        else:
            args += ["--ro-bind", str(path), str(path)]
        bound.append(path)
    return args


def bwrap_prefix(readable: list[Path], *, work_mb: int, shm_mb: int, mapped: bool = False) -> list[str]:
    """The bubblewrap command line, built from an allow-list: nothing but these is in the sandbox.

    Read-only: the system folders (``SYSTEM``), ``/etc``'s pieces in ``ETC`` and ``readable`` (the
    interpreter's prefixes, ``common/``, what runs inside). Writable: the working copy ``WORKDIR``
    (``/tmp``), a tmpfs of ``work_mb`` MiB holding HOME, ``tmp`` and ``data``, and ``/dev/shm``, a
    tmpfs of ``shm_mb`` MiB (its files are memory). Everything else is absent: the repository, the
    submissions, the report, other users' and the grader's home. No network (only a loopback of its
    own), its own PID namespace (everything ends with it). As root, or ``mapped`` (started as the root
    of a user namespace that maps a subordinate uid: ``uids.userns_prefix``), the uid stays root for the
    judge's ``setpriv`` to drop to a uid of its own; otherwise a user namespace of bubblewrap's runs it
    as ``SANDBOX_UID``.

    Raises:
        ValueError: A readable folder would cover the working copy.
    """
    for path in readable:
        if WORKDIR.is_relative_to(path):
            raise ValueError(f"{path} would cover the sandbox's working copy {WORKDIR}")
    user = [] if os.geteuid() == 0 or mapped else \
        ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    work = [a for sub in ("home", "tmp", "data") for a in ("--perms", "0777", "--dir", str(WORKDIR / sub))]
    return ["bwrap", *user, "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts",
            "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(shm_mb * 2**20), "--tmpfs", "/dev/shm",
            "--perms", "1777", "--size", str(work_mb * 2**20), "--tmpfs", str(WORKDIR), *work,
            *_binds(readable), "--chdir", str(WORKDIR), "--"]


def setpriv_prefix(uid: int | None) -> list[str]:
    """The judge's privileges, set on its command line: never new privileges (no setuid program
    gives any back); with ``uid`` (its own: as root, or as the root of a namespace that maps it) that
    uid without any capability; as root with none, uid 0 without any capability.

    Raises:
        RuntimeError: ``setpriv`` (util-linux) is not installed.
    """
    if shutil.which("setpriv") is None:
        raise RuntimeError("setpriv not found (it is part of util-linux): the judge's privileges are set with it")
    args = ["setpriv", "--no-new-privs"]
    if uid is not None:
        args += ["--reuid", str(uid), "--regid", str(uid), "--clear-groups"]
    if uid is not None or os.geteuid() == 0:
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
        command = [*bwrap_prefix([], work_mb=1, shm_mb=1), "true"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode == 0:
            return "bwrap", ("bubblewrap: an allow-list (the interpreter, common/ and a working copy of "
                              "its own in sight, nothing else), no network")
        why = f"bwrap does not work here: {done.stderr.strip()[:200]}"
    if mode == "bwrap":
        raise RuntimeError(why)
    return "none", (why + "; UNSAFE FOR UNTRUSTED SUBMISSIONS: running without a sandbox (no network "
                     "or file isolation); files are hashed and restored, strays killed")


def readable_by_others(path: Path) -> bool:
    """True if a user other than the owner can reach ``path`` (every parent searchable, it readable)."""
    path = Path(path).resolve()
    if not path.exists() or not path.stat().st_mode & 0o004:
        return False
    return all(parent.stat().st_mode & 0o001 for parent in path.parents)
