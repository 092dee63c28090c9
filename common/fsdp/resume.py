"""The resume contract of ``common.fsdp.train``: the DDP trainer's, for distributed checkpoints.

What a checkpoint must agree with before its tensors are read, in order:

1. The folder holds one run's checkpoints (``check_one_run``) and no other live run writes
   there (``claim_folder``: rank 0 takes ``DIR/writer.lock``, ``common.fsdp.lock``).
2. The run record stored with the digests in the newest checkpoint's ``.metadata``
   (settings, data, position) passes ``common.ddp.snapshot.check_resume``, the check every
   trainer shares: every setting outside ``RESUME_MAY_CHANGE`` as saved, each named if not;
   the data as saved (``--data`` is a setting; the class list, and both ``labels.csv`` or
   ImageFolder file lists by sha256: ``common.images.layouts.data_identity``, so a folder regenerated
   in place, or one with other classes, is told apart too); and a ``--num-epochs`` that
   does not end before the saved position (a longer one extends the run, with the schedule
   rebuilt, and the resume record and a note on stderr say so).
3. ``load_checkpoint`` verifies every file's sha256 (``common.fsdp.integrity``), then the
   loader state read back must agree with the position (``check_extra``), on every rank,
   before the model and the optimizer are touched.

Checks that only one rank makes (the lock) or whose verdict may differ per rank (its own
loader state) are gathered, so that every rank raises together: a rank that raised alone
would leave the others waiting in their next collective.
"""

from __future__ import annotations

import json
import os
import pickle
import uuid
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from common.ddp.process_group import DistInfo, gather_objects
from common.ddp.snapshot import SnapshotError, check_resume
from common.fsdp.checkpoint import check_one_run
from common.fsdp.config import RESUME_MAY_CHANGE, FSDPTrainConfig
from common.fsdp.integrity import CheckpointError, Manifest
from common.fsdp.loader import loaded_state, loader_state_problem
from common.fsdp.lock import acquire_lock

_RECORD = ("run_id", "settings", "data", "position")


def raise_on_every_rank(problem: str) -> None:
    """Raise ``CheckpointError`` on every rank if any rank has a ``problem`` (a collective).

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    problems = [found for found in gather_objects(problem) if found]
    if problems:
        raise CheckpointError("; ".join(dict.fromkeys(problems)))


def plain_settings(config: FSDPTrainConfig) -> dict:
    """``asdict(config)`` as the checkpoint stores it (JSON values: tuples become lists).

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    return json.loads(json.dumps(asdict(config)))


def run_record(run_id: str, config: FSDPTrainConfig, identity: Mapping[str, str],
               position: Mapping[str, int]) -> dict:
    """What every checkpoint of a run records with its digests: run id, settings, data, position.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    return {"run_id": run_id, "settings": plain_settings(config), "data": dict(identity),
            "position": {key: int(value) for key, value in position.items()}}


def claim_folder(root: str | os.PathLike) -> str:
    """On rank 0: the run id of the folder's run (a new one for an empty folder), locked.

    Raises:
        CheckpointError: Checkpoints of two runs in the folder, or another live writer.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    run_id = check_one_run(root) or uuid.uuid4().hex[:12]
    acquire_lock(root, run_id)
    return run_id


def claim_on_rank0(root: str | os.PathLike, info: DistInfo) -> str:
    """``claim_folder`` on rank 0, its run id (or its error) on every rank.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    claim = {"run_id": "", "error": ""}
    if info.rank == 0:
        try:
            claim["run_id"] = claim_folder(root)
        except CheckpointError as error:
            claim["error"] = str(error)
    claim = gather_objects(claim)[0]
    if claim["error"]:
        raise CheckpointError(claim["error"])
    return claim["run_id"]


def check_before_loading(path: Path, manifest: Manifest, config: FSDPTrainConfig,
                         identity: Mapping[str, str]) -> bool:
    """Settings, data and ``--num-epochs`` against the checkpoint's run record (step 2 above).

    Returns:
        Whether ``--num-epochs`` changed (the schedule must be rebuilt).

    Raises:
        CheckpointError: Naming each setting or data file that differs, or the position
            past the new end.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    lacking = [key for key in _RECORD if key not in manifest.run]
    if lacking:
        raise CheckpointError(f"{path / '.metadata'}: its run record lacks {lacking} (not "
                              "written by common.fsdp.train); nothing was loaded")
    record = manifest.run
    saved = {"settings": record["settings"], "identity": record["data"], **record["position"]}
    try:
        return check_resume(path, saved, plain_settings(config), may_change=RESUME_MAY_CHANGE,
                            identity=identity, what="checkpoint")
    except SnapshotError as error:
        raise CheckpointError(str(error)) from error


def length_change(saved_epochs: int, num_epochs: int, position: Mapping[str, int]) -> str:
    """What a resume with another ``--num-epochs`` does, in words (for stderr).

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    verb = "extends" if num_epochs > saved_epochs else "shortens"
    ended = (f", which had ended after epoch {position['epoch']}"
             if (position["epoch"], position["batch_in_epoch"]) >= (saved_epochs, 0) else "")
    return (f"--num-epochs {saved_epochs} -> {num_epochs} {verb} the run{ended}; the "
            f"learning-rate schedule is rebuilt for {num_epochs} epochs at step "
            f"{position['step']}")


def check_extra(path: Path, extra: dict, *, position: Mapping[str, int], info: DistInfo,
                loader=None) -> dict | None:
    """The extra values read back, against the position (step 3 above); on every rank.

    Args:
        loader: This rank's ``StatefulDataLoader`` when its saved state is to be used
            (same world size, same ``--num-workers``), else ``None``.

    Returns:
        This rank's loader state, checked (``None`` without ``loader`` or at an epoch's start).

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    found = {key: int(value) for key, value in extra["position"].items()}
    problem, state = "", None
    if found != dict(position):
        problem = (f"checkpoint {path}: its files hold the position {found}, its .metadata "
                   f"{dict(position)}")
    elif loader is not None and position["batch_in_epoch"]:
        try:
            state = loaded_state(extra["loader"], info.rank)
            reason = loader_state_problem(state, batches=position["batch_in_epoch"],
                                          batch_size=loader.batch_size,
                                          num_workers=loader.num_workers)
        except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError,
                AttributeError) as error:
            reason = f"it cannot be read ({type(error).__name__}: {error})"
        if reason:
            problem = (f"checkpoint {path}: the loader state of rank {info.rank} is refused: "
                       f"{reason}; nothing was loaded")
    raise_on_every_rank(problem)
    return state
