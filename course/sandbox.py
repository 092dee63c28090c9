"""Contain untrusted notebook code: a bubblewrap sandbox for its kernel, and a file guard.

``choose_sandbox`` decides whether bubblewrap works on this machine; ``bwrap_prefix`` is
the command line that makes the whole machine read-only except one working copy and
hides chosen folders; ``PrefixedKernelManager`` starts a Jupyter kernel behind such a
prefix. ``FileGuard`` snapshots files (bytes and sha256) so that any change made by the
code, sandboxed or not, can be reported and undone. ``course.grading`` uses all four.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from jupyter_client import AsyncKernelManager
from traitlets import List, Unicode


class FileGuard:
    """Remembers files (bytes and sha256) so that any change can be reported and undone.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """

    def __init__(self, roots: list[tuple[Path, tuple[str, ...]]]) -> None:
        self.roots = [(Path(root), patterns) for root, patterns in roots]
        self.saved = {path: path.read_bytes() for path in self._listing()}
        self.hashes = {path: hashlib.sha256(data).hexdigest() for path, data in self.saved.items()}

    def _listing(self) -> list[Path]:
        found = []
        for root, patterns in self.roots:
            for pattern in patterns:
                found += [p for p in root.rglob(pattern) if p.is_file()
                          and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts]
        return sorted(set(found))

    def changes(self) -> list[str]:
        """Describe every file modified, deleted or created since the snapshot."""
        now = set(self._listing())
        found = [f"deleted {p}" for p in self.saved if p not in now]
        found += [f"created {p}" for p in sorted(now - set(self.saved))]
        found += [f"modified {p}" for p in self.saved if p in now
                  and hashlib.sha256(p.read_bytes()).hexdigest() != self.hashes[p]]
        return found

    def restore(self) -> None:
        """Put every remembered file back and remove files created since."""
        for path in set(self._listing()) - set(self.saved):
            path.unlink()
        for path, data in self.saved.items():
            if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != self.hashes[path]:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)


class PrefixedKernelManager(AsyncKernelManager):
    """A kernel manager that starts the kernel behind a command prefix (the sandbox).

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """

    prefix = List(Unicode())

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        """The kernel's command line with ``prefix`` in front."""
        return [*self.prefix, *super().format_kernel_cmd(extra_arguments)]


def bwrap_prefix(workdir: Path, hidden: list[Path]) -> list[str]:
    """The bubblewrap command line: everything read-only, ``workdir`` writable, ``hidden`` empty.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/dev/shm"]
    for path in hidden:
        args += ["--tmpfs", str(path)]
    # JPY_PARENT_PID would make ipykernel exit: in a new PID namespace its parent looks like init.
    return args + ["--bind", str(workdir), str(workdir), "--unshare-pid", "--unshare-ipc",
                   "--die-with-parent", "--new-session", "--unsetenv", "JPY_PARENT_PID",
                   "--chdir", str(workdir), "--"]


def choose_sandbox(mode: str) -> tuple[str, str]:
    """Return ``("bwrap" | "none", why)``: bwrap if asked or if ``auto`` and a probe works.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    if mode == "none":
        return "none", "sandbox disabled (--sandbox none)"
    if shutil.which("bwrap") is None:
        why = "bwrap not found (apt-get install bubblewrap)"
    else:
        with tempfile.TemporaryDirectory() as probe:
            command = [*bwrap_prefix(Path(probe), []), "true"]
            done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode == 0:
            return "bwrap", "bubblewrap: read-only machine, writable working copy"
        why = f"bwrap does not work here: {done.stderr.strip()[:200]}"
    if mode == "bwrap":
        raise RuntimeError(why)
    return "none", why + "; running without a sandbox, files are still hashed"
