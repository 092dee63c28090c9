"""Write guard for tests/test_installed.py: logs every write under one folder (the checkout).

tests/test_installed.py copies this file into the site-packages of a fresh virtual
environment, with a ``.pth`` line that imports it, so every Python process of that
environment (the notebook kernel, its subprocesses, torchrun ranks, DataLoader workers)
installs this audit hook at start-up. A file opened for writing, a folder made, a rename,
link or removal under ``$COMPANION_WRITEGUARD_ROOT`` is appended to
``$COMPANION_WRITEGUARD_LOG``; the test fails on any line there. Nothing is blocked: the log
names every offending path, even where the code under test would swallow an exception.
"""

import os
import sys

_ROOT = os.environ.get("COMPANION_WRITEGUARD_ROOT")
_LOG = os.environ.get("COMPANION_WRITEGUARD_LOG")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
#: Audit events that change the file system, and which of their arguments are paths.
_PATH_ARGS = {"os.mkdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1), "os.remove": (0,),
              "os.rmdir": (0,), "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,),
              "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.move": (1,)}


def _inside(path) -> bool:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        return False  # a file descriptor
    path = os.path.abspath(os.fspath(path))
    return path == _ROOT or path.startswith(_ROOT + os.sep)


def _log(event: str, path) -> None:
    with open(_LOG, "a", encoding="utf-8") as handle:
        handle.write(f"{event} {os.fsdecode(path) if isinstance(path, bytes) else path} "
                     f"(pid {os.getpid()}, {sys.argv[:3]})\n")


def _hook(event: str, args: tuple) -> None:
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing and _inside(path):
            _log(event, path)
    elif event in _PATH_ARGS:
        for index in _PATH_ARGS[event]:
            if index < len(args) and _inside(args[index]):
                _log(event, args[index])


if _ROOT and _LOG:
    _ROOT = os.path.abspath(_ROOT)
    sys.addaudithook(_hook)
