"""Running one cell's code in a process of the judge, and saying in one line why it failed.

The judge runs setup cells with it, the checker the check cell, the answer process the
answer cells; the limits it names are the ones the checker set (``checker.set_limits``).
"""

from __future__ import annotations

import errno

from course.grading.inside.channel import MAX_MESSAGE


def describe(error: BaseException, limits: dict) -> str:
    """One line for a failure; a limit that was hit is named with its value."""
    if isinstance(error, MemoryError):
        return f"MemoryError: the memory limit ({limits['memory_mb']} MiB) was reached"
    if isinstance(error, OSError) and error.errno == errno.EFBIG:
        return f"OSError: the output/file size limit ({limits['file_mb']} MiB per file) was reached"
    if isinstance(error, OSError) and error.errno == errno.EAGAIN:
        return f"OSError: the process limit ({limits['processes']}) was reached"
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return (f"OSError: no space left (an exercise's files may take {limits['file_mb']} MiB, "
                f"/dev/shm {limits['memory_mb']} MiB)")
    if isinstance(error, OSError) and error.errno == errno.EMFILE:
        return f"OSError: the open-file limit ({limits['open_files']}) was reached"
    text = f"{type(error).__name__}: {error}".strip().rstrip(":")
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " ..."


def run_cell(code: str, namespace: dict, name: str, limits: dict) -> str | None:
    """Run ``code`` in ``namespace``; None if it finished, else why it did not (``describe``)."""
    try:
        exec(compile(code, name, "exec"), namespace)  # running cells is the judge's job
    except BaseException as error:  # noqa: BLE001 - every failure is a result, SystemExit included
        return describe(error, limits)
    return None
