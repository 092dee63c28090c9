"""An exercise's files, inside the sandbox: the same room for every exercise, what it left and changed.

The sandbox's working copy is its ``/tmp``, a tmpfs (HOME and the data are on it) of ``file_mb`` MiB
plus room for the setup cells' files (``course.grading.sandbox``). Before each exercise the judge
takes all but ``file_mb`` MiB of what is free into a reserve: a file without a name
(``O_TMPFILE``) that only the judge holds (opened after the template was forked, so no checker or
answer process has it), so the files of one exercise together can take exactly ``file_mb`` MiB,
whatever the setup left. After the exercise a filled working copy or ``/dev/shm`` is named in its
result (``space_hit``), and the judge removes the files it created (``listing``, ``remove_new``)
and names those of the setup it changed (``file_stats``, ``changed_files``). A checkout that lies
below ``/tmp`` on the host (a CI clone) is bound into the working copy read-only: ``walk`` stays on
the working copy's own file system, so none of these reads the bound folders (a venv of 6 GB).
"""

from __future__ import annotations

import os

#: Free bytes below which a tmpfs counts as filled (a write that failed leaves less than a page or so).
FULL = 256 * 1024


class Reserve:
    """The space of the working copy ``root`` that an exercise may not use; resized before each one."""

    def __init__(self, root: str, file_mb: int) -> None:
        self.root, self.allowed, self.size = root, file_mb * 2**20, 0
        self.fd = os.open(root, os.O_TMPFILE | os.O_RDWR, 0o600)

    def refill(self) -> None:
        """Leave ``file_mb`` MiB free (or what there is, if the setup took more)."""
        info = os.statvfs(self.root)
        target = max(0, info.f_bavail * info.f_frsize + self.size - self.allowed)
        if target < self.size:
            os.ftruncate(self.fd, target)
        elif target > self.size:
            os.posix_fallocate(self.fd, 0, target)
        self.size = target


def filled(path: str) -> bool:
    """Whether the file system of ``path`` has (almost) no room left."""
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize < FULL


def space_hit(root: str, shm: str | None, limits: dict, reserve: Reserve | None) -> str | None:
    """The disk or /dev/shm limit the exercise filled, named; None if neither (or no tmpfs here)."""
    if reserve is None:
        return None
    if filled(root):
        return (f"the disk limit of {limits['file_mb']} MiB for the exercise was reached "
                "(its files in the working copy, HOME and /tmp together)")
    if shm and filled(shm):
        return f"the /dev/shm limit of {limits['memory_mb']} MiB for the exercise was reached"
    return None


def walk(root: str):
    """``os.walk(root)`` that does not enter a folder on another file system than ``root`` (a
    read-only bind of an allowed folder into the working copy): nothing there can change."""
    device = os.lstat(root).st_dev
    for folder, dirs, names in os.walk(root):
        inside = [d for d in dirs if _device(os.path.join(folder, d)) == device]
        names += [d for d in dirs if d not in inside]  # listed, not entered
        dirs[:] = inside
        yield folder, dirs, names


def _device(path: str) -> int | None:
    try:
        return os.lstat(path).st_dev
    except OSError:
        return None


def listing(root: str) -> set[str]:
    """Every file and folder under ``root`` (on its file system)."""
    found = set()
    for folder, dirs, names in walk(root):
        found.update(os.path.join(folder, n) for n in (*dirs, *names))
    return found


def remove_new(root: str, before: set[str]) -> None:
    """Remove what is under ``root`` but not in ``before`` (deepest first)."""
    for path in sorted(listing(root) - before, reverse=True):
        try:
            os.rmdir(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
        except OSError:
            pass


def file_stats(root: str) -> dict[str, tuple]:
    """Regular files under ``root`` (but the output log) and what would show any change to them."""
    found = {}
    for folder, _, names in walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if os.path.isfile(path) and not os.path.islink(path) and name != "output.log":
                found[path] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return found


def changed_files(before: dict[str, tuple], written: list, root: str) -> list[str]:
    """Files that existed before the exercise and changed, though the checker did not write them."""
    now = file_stats(root)
    mine = [str(p) for p in written]
    return [os.path.relpath(p, root) + " (changed)" for p, stat in before.items()
            if now.get(p) != stat and not any(p == w or p.startswith(w + os.sep) for w in mine)][:20]
