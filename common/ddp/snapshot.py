"""Training snapshots that survive a crash: written atomically, loaded safely.

A snapshot holds everything a run needs to continue exactly where it stopped: model,
optimizer and scheduler state, epoch, optimizer step, the position inside the epoch
and every rank's RNG state. It is written by rank 0 only, to a temporary file in the
same folder, flushed to disk (``fsync``) and renamed over the old snapshot with
``os.replace`` — a rename within one file system is atomic, so a process killed at any
moment leaves either the old snapshot or the new one, never half of one.

Loading uses ``torch.load(weights_only=True)``, which unpickles only tensors and plain
containers: a snapshot file cannot run code. Every check happens before anything is
modified, and a refused snapshot is left on disk untouched for inspection.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from common.ddp.process_group import gather_objects, is_main_process, unwrap

FORMAT = "companion-ddp-snapshot-v1"
_REQUIRED = ("format", "model", "optimizer", "scheduler", "epoch", "step", "batch_in_epoch", "rng")


class SnapshotError(ValueError):
    """A snapshot that cannot be used; the message names the file and the reason.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """


@dataclass(frozen=True)
class Position:
    """Where a run stands: ``epoch`` (0-based), optimizer ``step`` (global), and
    ``batch_in_epoch``, the micro-batches of ``epoch`` already consumed by each rank.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    epoch: int = 0
    step: int = 0
    batch_in_epoch: int = 0


def capture_rng_state() -> dict:
    """This process's Python, NumPy, torch (and CUDA) RNG states, as tensors and tuples.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss)}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """Undo ``capture_rng_state``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def atomic_save(obj: object, path: str | os.PathLike) -> Path:
    """``torch.save`` to a temporary file beside ``path``, ``fsync``, then ``os.replace``.

    Temporary files left behind by an earlier killed writer are removed first.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink()
    handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    # Make the rename itself durable: fsync the folder that holds the new name.
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return path


def save_snapshot(path: str | os.PathLike, *, model: nn.Module,
                  optimizer: torch.optim.Optimizer,
                  scheduler: torch.optim.lr_scheduler.LRScheduler,
                  position: Position) -> Path | None:
    """Write a snapshot; call it on every rank (it gathers each rank's RNG state).

    Returns:
        The path on rank 0; ``None`` on the other ranks, which write nothing.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    rng = gather_objects(capture_rng_state())
    if not is_main_process():
        return None
    snapshot = {"format": FORMAT, "model": unwrap(model).state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "epoch": position.epoch, "step": position.step,
                "batch_in_epoch": position.batch_in_epoch, "rng": rng}
    return atomic_save(snapshot, path)


def read_snapshot(path: str | os.PathLike) -> dict:
    """Load and check a snapshot file without touching any model.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        SnapshotError: If the file is truncated or not a PyTorch file, holds anything but
            tensors and plain containers, or is not a snapshot of this format.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"snapshot {path} does not exist")
    try:
        snapshot = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        detail = str(error).partition("WeightsUnpickler error:")[2].partition("Check the doc")[0]
        raise SnapshotError(f"refusing snapshot {path}: it holds objects other than tensors and "
                            f"plain containers, which weights_only=True will not unpickle "
                            f"({' '.join(detail.split())[:300] or error})") from error
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise SnapshotError(f"snapshot {path} is truncated or not a PyTorch file "
                            f"({path.stat().st_size} bytes): {error}") from error
    if not isinstance(snapshot, dict) or snapshot.get("format") != FORMAT:
        found = snapshot.get("format") if isinstance(snapshot, dict) else type(snapshot).__name__
        raise SnapshotError(f"{path} is not a {FORMAT} snapshot (found {found!r})")
    missing = [key for key in _REQUIRED if key not in snapshot]
    if missing:
        raise SnapshotError(f"snapshot {path} lacks the entries {missing}")
    return snapshot


def check_model_state(path: str | os.PathLike, state: dict, model: nn.Module) -> None:
    """Refuse a state dict whose names or shapes differ from ``model``'s.

    Raises:
        SnapshotError: Naming the file, the model class and the first difference.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    expected = unwrap(model).state_dict()
    name = type(unwrap(model)).__name__
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise SnapshotError(f"snapshot {path} is not of this {name}: missing {missing[:3]}, "
                            f"unexpected {unexpected[:3]}")
    for key, tensor in expected.items():
        if not isinstance(state[key], torch.Tensor) or state[key].shape != tensor.shape:
            got = getattr(state[key], "shape", type(state[key]).__name__)
            raise SnapshotError(f"snapshot {path} is not of this {name}: {key} has shape "
                                f"{tuple(got)} in the file, {tuple(tensor.shape)} in the model")


def load_snapshot(path: str | os.PathLike, *, model: nn.Module,
                  optimizer: torch.optim.Optimizer | None = None,
                  scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
                  rank: int = 0) -> Position:
    """Restore model, optimizer, scheduler and this rank's RNG state from a snapshot.

    The file is read and checked completely before anything is modified.

    Returns:
        The ``Position`` to continue from.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    snapshot = read_snapshot(path)
    check_model_state(path, snapshot["model"], model)
    unwrap(model).load_state_dict(snapshot["model"])
    if optimizer is not None:
        optimizer.load_state_dict(snapshot["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(snapshot["scheduler"])
    # A run resumed on another number of ranks reuses the saved states round-robin.
    restore_rng_state(snapshot["rng"][rank % len(snapshot["rng"])])
    return Position(snapshot["epoch"], snapshot["step"], snapshot["batch_in_epoch"])
