"""Training snapshots that survive a crash: written atomically, loaded safely.

A snapshot holds everything a run needs to continue exactly where it stopped: model,
optimizer and scheduler state, epoch, optimizer step, the position inside the epoch
and every rank's RNG state. It is written by rank 0 only, atomically (``common.atomic_io``: a temporary file
in the same folder, flushed to disk and renamed over the old snapshot), so a process killed
at any moment leaves either the old snapshot or the new one, never half of one. This module is
the resume contract: what a snapshot holds and every check it passes before a run continues.

Loading uses ``torch.load(weights_only=True)``, which unpickles only tensors and plain
containers: a snapshot file cannot run code. A sha256 over the whole payload (every tensor's
bytes and every value) detects a damaged file. Every check happens before anything is
modified — the model's names and shapes, the optimizer's class, groups and state shapes,
the scheduler's class, every rank's RNG state and the run's settings — and a refused
snapshot is left on disk untouched for inspection.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import random
import zipfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from common.atomic_io import write_atomically
from common.cli import flag_name
from common.ddp.process_group import gather_objects, is_main_process, unwrap

FORMAT = "companion-ddp-snapshot-v2"
_REQUIRED = ("format", "model", "optimizer", "optimizer_class", "scheduler", "scheduler_class",
             "epoch", "step", "batch_in_epoch", "rng", "settings", "checksum")


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
    """``torch.save`` written atomically (``common.atomic_io.write_atomically``): a killed writer
    leaves the old file; temporary files left behind by an earlier killed writer are removed first.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return write_atomically(path, functools.partial(torch.save, obj), remove_stale=True)


def payload_digest(obj: object) -> str:
    """sha256 of a snapshot's contents: every tensor's dtype, shape and bytes, every value.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    digest = hashlib.sha256()
    _feed(digest, obj)
    return digest.hexdigest()


def _feed(digest, obj: object) -> None:
    if isinstance(obj, torch.Tensor):
        tensor = obj.detach().cpu().contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, dict):
        digest.update(f"D{len(obj)}".encode())
        for key in sorted(obj, key=repr):
            _feed(digest, key)
            _feed(digest, obj[key])
    elif isinstance(obj, (list, tuple)):
        digest.update(f"{type(obj).__name__}{len(obj)}".encode())
        for item in obj:
            _feed(digest, item)
    else:
        digest.update(f"{type(obj).__name__}:{obj!r};".encode())


def save_snapshot(path: str | os.PathLike, *, model: nn.Module,
                  optimizer: torch.optim.Optimizer,
                  scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
                  position: Position, settings: Mapping[str, object] | None = None,
                  identity: Mapping[str, str] | None = None) -> Path | None:
    """Write a snapshot; call it on every rank (it gathers each rank's RNG state).

    Args:
        settings: What defines the run (plain values, e.g. ``asdict(config)``), stored so
            that a resume with other settings can be refused (``load_snapshot(settings=)``).
        identity: What the run's data is, ``{file: sha256}`` (e.g. each shard of a
            manifest), stored so that a resume on other data can be refused (``check_resume``).

    Returns:
        The path on rank 0; ``None`` on the other ranks, which write nothing.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    rng = gather_objects(capture_rng_state())
    if not is_main_process():
        return None
    snapshot = {"format": FORMAT, "model": unwrap(model).state_dict(),
                "optimizer": optimizer.state_dict(), "optimizer_class": type(optimizer).__name__,
                "scheduler": scheduler.state_dict() if scheduler is not None else {},
                "scheduler_class": type(scheduler).__name__ if scheduler is not None else None,
                "epoch": position.epoch, "step": position.step,
                "batch_in_epoch": position.batch_in_epoch, "rng": rng,
                "settings": dict(settings or {}), "identity": dict(identity or {})}
    snapshot["checksum"] = payload_digest(snapshot)
    return atomic_save(snapshot, path)


def read_snapshot(path: str | os.PathLike) -> dict:
    """Load and check a snapshot file without touching any model.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        SnapshotError: If the file is truncated or not a PyTorch file, holds anything but
            tensors and plain containers, is not a snapshot of this format, or its
            checksum does not match its contents.

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
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError, IndexError,
            KeyError, TypeError, AttributeError) as error:  # a text file: IndexError
        raise SnapshotError(f"snapshot {path} is truncated or not a PyTorch file "
                            f"({path.stat().st_size} bytes): {error}") from error
    if not isinstance(snapshot, dict) or snapshot.get("format") != FORMAT:
        found = snapshot.get("format") if isinstance(snapshot, dict) else type(snapshot).__name__
        raise SnapshotError(f"{path} is not a {FORMAT} snapshot (found {found!r})")
    missing = [key for key in _REQUIRED if key not in snapshot]
    if missing:
        raise SnapshotError(f"snapshot {path} lacks the entries {missing}")
    payload = {key: value for key, value in snapshot.items() if key != "checksum"}
    if payload_digest(payload) != snapshot["checksum"]:
        raise SnapshotError(f"snapshot {path}: checksum mismatch, the file was damaged or changed "
                            "after it was written (the contents no longer match their sha256)")
    return snapshot


def check_model_state(path: str | os.PathLike, state: dict, model: nn.Module) -> None:
    """Refuse a state dict whose names or shapes differ from ``model``'s.

    Raises:
        SnapshotError: Naming the file, the model class and the first difference.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    expected = unwrap(model).state_dict()
    name = type(unwrap(model)).__name__
    if not isinstance(state, dict):
        raise SnapshotError(f"snapshot {path}: the model entry is a {type(state).__name__}")
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


def check_optimizer_state(path: str | os.PathLike, snapshot: dict,
                          optimizer: torch.optim.Optimizer) -> None:
    """Refuse optimizer state of another optimizer class, other groups or other shapes.

    Raises:
        SnapshotError: Naming the file and the first difference.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    name, saved = type(optimizer).__name__, snapshot["optimizer_class"]
    if saved != name:
        raise SnapshotError(f"snapshot {path} holds {saved} state; this run's optimizer is {name}")
    state, own = snapshot["optimizer"], optimizer.state_dict()
    if not isinstance(state, dict) or not isinstance(state.get("param_groups"), list) \
            or not isinstance(state.get("state"), dict):
        raise SnapshotError(f"snapshot {path}: the optimizer entry is not an optimizer state")
    groups = state["param_groups"]
    if len(groups) != len(own["param_groups"]):
        raise SnapshotError(f"snapshot {path}: {len(groups)} parameter group(s) in the file, "
                            f"{len(own['param_groups'])} in the optimizer")
    params = {}
    for i, (group, mine) in enumerate(zip(groups, optimizer.param_groups, strict=True)):
        if not isinstance(group, dict) or len(group.get("params", ())) != len(mine["params"]):
            count = len(group.get("params", ())) if isinstance(group, dict) else "no"
            raise SnapshotError(f"snapshot {path}: parameter group {i} has {count} parameters "
                                f"in the file, {len(mine['params'])} in the optimizer")
        lacking = sorted(set(own["param_groups"][i]) - set(group))
        if lacking:
            raise SnapshotError(f"snapshot {path}: parameter group {i} lacks {lacking} "
                                f"(state of another optimizer?)")
        params.update(zip(group["params"], mine["params"], strict=True))
    for key, entry in state["state"].items():
        if key not in params or not isinstance(entry, dict):
            raise SnapshotError(f"snapshot {path}: optimizer state for unknown parameter {key!r}")
        for field, value in entry.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 \
                    and value.shape != params[key].shape:
                raise SnapshotError(f"snapshot {path}: optimizer state {field} of parameter {key} "
                                    f"has shape {tuple(value.shape)}, the parameter "
                                    f"{tuple(params[key].shape)}")


def check_scheduler_state(path: str | os.PathLike, snapshot: dict,
                          scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """Refuse scheduler state of another scheduler class or with missing entries.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    name, saved, state = type(scheduler).__name__, snapshot["scheduler_class"], snapshot["scheduler"]
    if saved != name:
        raise SnapshotError(f"snapshot {path} holds {saved} state; this run's scheduler is {name}")
    lacking = sorted(set(scheduler.state_dict()) - set(state)) if isinstance(state, dict) else "all"
    if lacking:
        raise SnapshotError(f"snapshot {path}: the scheduler state lacks {lacking}")


def check_rng_states(path: str | os.PathLike, states: object) -> None:
    """Refuse RNG states that cannot be restored, by trying each on a throwaway generator.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if not isinstance(states, list) or not states:
        raise SnapshotError(f"snapshot {path}: the RNG entry must list one state per rank, got "
                            f"{states!r:.60}")
    for rank, state in enumerate(states):
        try:
            random.Random().setstate(state["python"])
            torch.Generator().set_state(state["torch"])
            kind, keys, pos, has_gauss, gauss = state["numpy"]
            np.random.RandomState().set_state((kind, keys.numpy().astype(np.uint32), pos,
                                               has_gauss, gauss))
            cuda = state.get("cuda", [])
            if not all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda):
                raise TypeError("CUDA states must be uint8 tensors")
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError,
                OverflowError) as error:
            raise SnapshotError(f"snapshot {path}: the RNG state of rank {rank} cannot be "
                                f"restored ({type(error).__name__}: {error})") from error


def check_settings(path: str | os.PathLike, saved: Mapping[str, object],
                   current: Mapping[str, object], *, may_change: Collection[str] = (),
                   what: str = "snapshot") -> None:
    """Refuse a resume whose settings differ from the snapshot's, naming every difference.

    Raises:
        SnapshotError: Listing ``--flag snapshot-value -> current-value`` for each setting
            that differs and is not in ``may_change``. ``what`` names the saved thing and
            its flag in the message (``"checkpoint"``: ``common.fsdp.train``'s).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    absent = "(absent)"
    differ = [f"{flag_name(key)} {saved.get(key, absent)!r} -> {current.get(key, absent)!r}"
              for key in sorted(set(saved) | set(current))
              if key not in may_change and saved.get(key, absent) != current.get(key, absent)]
    if differ:
        allowed = ", ".join(flag_name(key) for key in sorted(may_change)) or "nothing"
        raise SnapshotError(f"{what} {path} was written by a run with other settings "
                            f"({what} -> now): {'; '.join(differ)}. Resume with the {what}'s "
                            f"values, or start a new run with another --{what} path; may "
                            f"change on resume: {allowed}")


def check_identity(path: str | os.PathLike, saved: Mapping[str, str],
                   current: Mapping[str, str], *, what: str = "snapshot") -> None:
    """Refuse a resume on other data: names each file added, missing or changed, and ``classes``.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    differ = [f"{name} added" if name not in saved else f"{name} missing" if name not in current
              else f"{name} {saved[name]!r} -> {current[name]!r}" if name == "classes"
              else f"{name} sha256 {saved[name][:12]}... -> {current[name][:12]}..."
              for name in sorted(set(saved) | set(current)) if saved.get(name) != current.get(name)]
    if differ:
        raise SnapshotError(f"{what} {path} was written by a run on other data ({what} -> "
                            f"now): {'; '.join(differ)}. Resume on the {what}'s data, or start "
                            f"a new run with another --{what} path")


def check_resume(path: str | os.PathLike, snapshot: dict, settings: Mapping[str, object], *,
                 may_change: Collection[str],
                 identity: Mapping[str, str] | None = None, what: str = "snapshot") -> bool:
    """What every trainer checks before it resumes, nothing modified yet: the settings
    (``check_settings``), the data (``check_identity``, if ``identity`` is given), and that the
    saved position is not past the end of ``--num-epochs``. Returns whether ``--num-epochs``
    changed (the run is extended or shortened: rebuild a schedule over it, and say so).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    check_settings(path, snapshot["settings"], settings, may_change=may_change, what=what)
    if identity is not None:
        check_identity(path, snapshot.get("identity", {}), identity, what=what)
    epochs = settings["num_epochs"]
    if (snapshot["epoch"], snapshot["batch_in_epoch"]) > (epochs, 0):
        raise SnapshotError(f"--num-epochs {epochs}: {what} {path} is already at step "
                            f"{snapshot['step']} (epoch {snapshot['epoch']}, batch "
                            f"{snapshot['batch_in_epoch']}), past the end of {epochs} epochs")
    return snapshot["settings"].get("num_epochs") != epochs


def load_snapshot(path: str | os.PathLike, *, model: nn.Module,
                  optimizer: torch.optim.Optimizer | None = None,
                  scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
                  rank: int = 0, settings: Mapping[str, object] | None = None,
                  may_change: Collection[str] = (), snapshot: dict | None = None) -> Position:
    """Restore model, optimizer, scheduler and this rank's RNG state from a snapshot.

    The file is read and checked completely — checksum, model, optimizer, scheduler, every
    rank's RNG state and (if ``settings`` is given) the run's settings — before anything
    is modified.

    Args:
        settings: This run's settings; refused if they differ from the stored ones
            outside ``may_change`` (see ``check_settings``).
        snapshot: The result of ``read_snapshot(path)``, if already read.

    Returns:
        The ``Position`` to continue from.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    snapshot = read_snapshot(path) if snapshot is None else snapshot
    if settings is not None:
        check_settings(path, snapshot["settings"], settings, may_change=may_change)
    check_model_state(path, snapshot["model"], model)
    if optimizer is not None:
        check_optimizer_state(path, snapshot, optimizer)
    if scheduler is not None:
        check_scheduler_state(path, snapshot, scheduler)
    check_rng_states(path, snapshot["rng"])
    # Everything is checked: apply.
    if optimizer is not None:
        optimizer.load_state_dict(snapshot["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(snapshot["scheduler"])
    unwrap(model).load_state_dict(snapshot["model"])
    # A run resumed on another number of ranks reuses the saved states round-robin.
    restore_rng_state(snapshot["rng"][rank % len(snapshot["rng"])])
    return Position(snapshot["epoch"], snapshot["step"], snapshot["batch_in_epoch"])
