"""Files written whole or not at all: a temporary file beside the target, ``fsync``, ``os.replace``.

A rename within one file system is atomic, so a writer killed at any moment (or one whose
``write`` raises) leaves either the old file or the new one, never half of one. The folder is
synced after the rename, so the new name itself survives a power cut. Standard library only: the
DDP trainer's snapshots (``common.ddp.snapshot.atomic_save``) and the grader's report
(``course.grading.report``) write through it.

Introduced in chapters/04_2_ddp_training.ipynb.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def temporary_files(path: str | os.PathLike) -> list[Path]:
    """The temporary files a writer of ``path`` makes (``.<name>.<random>.tmp`` beside it): what
    a killed writer leaves behind.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None], *,
                     remove_stale: bool = False) -> Path:
    """Call ``write(file)`` on a temporary file beside ``path``, ``fsync`` it, rename it over ``path``.

    Args:
        path: The file to write; its folder is made if missing.
        write: Writes the whole content to the open binary file it is given.
        remove_stale: First remove the temporary files of an earlier killed writer of ``path``
            (only where one writer at a time writes it).

    Returns:
        ``path``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in temporary_files(path) if remove_stale else ():
        stale.unlink(missing_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)
    return path


def write_text_atomically(path: str | os.PathLike, text: str) -> Path:
    """``text`` as UTF-8 through ``write_atomically``; a text that cannot be encoded (a lone
    surrogate) raises before any file is touched.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    data = text.encode("utf-8")
    return write_atomically(path, lambda file: file.write(data))


def _sync_folder(folder: Path) -> None:
    """Make a rename durable: ``fsync`` the folder that holds the new name."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
