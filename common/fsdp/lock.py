"""One writer per checkpoint folder: a lock file that names the run holding it.

Two runs writing into one ``--checkpoint`` folder interleave their ``step-NNNNNN`` folders,
prune each other's, and the next resume continues whichever is newest. So rank 0 of
``common.fsdp.train`` takes ``DIR/writer.lock`` before it resumes or writes anything — created
with ``O_CREAT | O_EXCL``, which succeeds for one creator only — holds it for the whole run,
``--async-save``'s background writes included, and removes it at the end. The file names its
holder: pid, host, run id, torchrun job (``TORCHELASTIC_RUN_ID``) and the process's start time.

A lock whose holder is gone is stale and is taken over, with a note on stderr:

- on this host, when no process with that pid and start time exists any more (a run killed
  with SIGKILL or by the OOM killer, a worker group stopped by torchrun for a restart or a
  membership change, a machine rebooted); the start time tells a reused pid from the holder;
- on another host, when the holder was an earlier worker group of the same torchrun job
  (torchrun stops a group before it starts the next one).

A holder on another host, of another job, cannot be checked from here: the error says to
delete the file once that run is gone. (Two runs taking over one stale lock in the same
instant are not told apart; the lock is for the user's mistake, not for a race of schedulers.)
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from common.fsdp.integrity import CheckpointError

LOCK_FILE = "writer.lock"
JOB_ENV = "TORCHELASTIC_RUN_ID"


@dataclass(frozen=True)
class Holder:
    """Who holds a checkpoint folder's lock.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """

    pid: int
    host: str
    run_id: str
    job: str = ""
    started: float = 0.0  # the process's start time (psutil), to tell a reused pid

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        job = f", torchrun job {self.job}" if self.job else ""
        return f"pid {self.pid} on {self.host} (run {self.run_id}{job}, started {when})"


def this_process(run_id: str) -> Holder:
    """The ``Holder`` record of this process for run ``run_id``.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    return Holder(os.getpid(), socket.gethostname(), run_id, os.environ.get(JOB_ENV, ""),
                  psutil.Process().create_time())


def read_holder(path: Path) -> Holder | None:
    """The holder named in the lock file ``path`` (``None`` if it vanished meanwhile).

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    try:
        return Holder(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{path}: unreadable lock file ({error}); if no run writes into "
                              f"{path.parent} any more, delete it") from error


def _alive(pid: int, started: float) -> bool:
    try:
        process = psutil.Process(pid)
        return (abs(process.create_time() - started) < 1.0
                and process.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def takeover_reason(holder: Holder, me: Holder) -> str:
    """Why ``holder``'s lock may be taken over by ``me`` (``""``: it may not).

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    if holder.host != me.host:  # no way to look at its processes from here
        if holder.job and holder.job == me.job:
            return f"an earlier worker group of this torchrun job {me.job}, stopped before this one"
        return ""
    if holder.pid == me.pid and abs(holder.started - me.started) < 1.0:
        return "left by an earlier run in this process"
    if not _alive(holder.pid, holder.started):
        return f"no process {holder.pid} started then runs on {me.host} any more"
    return ""


def _create(path: Path, me: Holder) -> bool:
    try:
        handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(handle, "w") as file:
        json.dump(asdict(me), file)
        file.flush()
        os.fsync(file.fileno())
    return True


def acquire_lock(root: str | os.PathLike, run_id: str) -> Path:
    """Take ``root/writer.lock`` for this process, taking over a stale one (see the module).

    Raises:
        CheckpointError: Another live run holds it; the message names that run.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path, me = root / LOCK_FILE, this_process(run_id)
    for _ in range(3):
        if _create(path, me):
            return path
        holder = read_holder(path)
        if holder is None:
            continue  # released meanwhile
        reason = takeover_reason(holder, me)
        if not reason:
            raise CheckpointError(
                f"{root}: another run writes checkpoints here: {holder.describe()}; lock file "
                f"{path}. One writer per checkpoint folder: wait for that run to end, or give "
                f"this one another --checkpoint (if that run is gone and ran on another host, "
                f"delete {path})")
        print(f"note: took over the stale lock {path} of {holder.describe()}: {reason}",
              file=sys.stderr, flush=True)
        path.unlink(missing_ok=True)
    raise CheckpointError(f"{path}: could not be taken (another run keeps creating it)")


def release_lock(root: str | os.PathLike) -> None:
    """Remove ``root/writer.lock`` if this process holds it (a no-op otherwise).

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    path = Path(root) / LOCK_FILE
    holder = read_holder(path) if path.exists() else None
    if holder is not None and holder.pid == os.getpid() and holder.host == socket.gethostname():
        path.unlink(missing_ok=True)
