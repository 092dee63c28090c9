"""What makes a distributed checkpoint trustworthy: digests written with it, checked before loading.

DCP's ``.metadata`` says which byte range of which ``__R_0.distcp`` file holds which piece of
which tensor, but nothing about whether those bytes are the ones that were written.
``DigestingWriter`` is DCP's ``FileSystemWriter`` with one step more: when a save finishes,
the coordinating rank reads back every file of it and stores each file's sha256, the step and
the run's record (whatever the trainer passes: run id, settings, data, position) in
``.metadata`` itself, as the ``Manifest`` that DCP keeps there in place of its plain
``StorageMeta``. So the digests travel with a copied ``step-NNNNNN`` folder, and the folder
holds nothing but DCP's own files. With ``dcp.async_save`` the reading back runs in the
writing thread, after the files are written, like the rest of the save.

``check_checkpoint`` refuses, before anything is loaded and naming the file: a missing or
unreadable ``.metadata``; a file it names that is missing or too short; a file whose bytes
are not those written (a bit flipped, a file of another run or of another step of this run
swapped in); a manifest of another step (a folder renamed) or of another run; a model of
other names or shapes. The manifest carries a checksum of its own fields; a change anywhere
else in ``.metadata`` shows as an unreadable file, or as shapes and offsets that do not fit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata

from common.digests import file_sha256

STEP_DIR = re.compile(r"^step-(\d{6,})$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded here; the message names the file and the reason.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """


@dataclass
class Manifest(StorageMeta):
    """DCP's ``StorageMeta`` plus what is checked before loading: step, run record, digests.

    Attributes:
        step: The optimizer step the checkpoint belongs to (``None``: a converted file).
        run: The writer's record (plain values): run id, settings, data, position.
        digests: ``{file name: sha256}`` of every file the save wrote.
        checksum: sha256 of the three fields above, as JSON.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """

    step: int | None = None
    run: dict = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    checksum: str = ""

    def expected_checksum(self) -> str:
        fields = {"step": self.step, "run": self.run, "digests": self.digests}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class DigestingWriter(dcp.FileSystemWriter):
    """``FileSystemWriter`` that stores a ``Manifest`` (digests, step, run) in ``.metadata``.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """

    def __init__(self, path: str | os.PathLike, *, step: int | None,
                 run: Mapping[str, object] | None = None) -> None:
        super().__init__(path)
        self.step, self.run, self.digests = step, json.loads(json.dumps(dict(run or {}))), {}

    def finish(self, metadata: Metadata, results: list) -> None:
        # Every rank's files are complete here: DCP gathers the write results first.
        names = sorted({result.storage_data.relative_path for per_rank in results
                        for result in per_rank})
        self.digests = {name: file_sha256(Path(self.path) / name) for name in names}
        super().finish(metadata, results)

    def storage_meta(self) -> Manifest:
        base = super().storage_meta()
        manifest = Manifest(checkpoint_id=base.checkpoint_id, save_id=base.save_id,
                            step=self.step, run=self.run, digests=dict(self.digests))
        manifest.checksum = manifest.expected_checksum()
        return manifest


def _read_metadata(path: Path) -> Metadata:
    meta_file = path / ".metadata"
    if not meta_file.is_file():
        raise CheckpointError(f"{meta_file}: missing; {path} is not a complete distributed "
                              "checkpoint")
    try:
        return dcp.FileSystemReader(path).read_metadata()
    except Exception as error:  # a truncated pickle raises EOFError, UnpicklingError, ...
        raise CheckpointError(f"{meta_file}: unreadable ({type(error).__name__}: {error}); "
                              "the file is truncated or corrupt") from error


def _manifest_of(path: Path, metadata: Metadata) -> Manifest:
    manifest = metadata.storage_meta
    meta_file = path / ".metadata"
    if not isinstance(manifest, Manifest):
        raise CheckpointError(f"{meta_file}: holds no digests (written by plain dcp.save, not "
                              "common.fsdp.checkpoint), so its files cannot be verified; "
                              "nothing was loaded")
    if manifest.checksum != manifest.expected_checksum():
        raise CheckpointError(f"{meta_file}: the manifest's checksum does not match its digests "
                              "and run record: the file was changed after it was written")
    found = STEP_DIR.match(path.name)
    if found and manifest.step is not None and int(found.group(1)) != manifest.step:
        raise CheckpointError(f"{meta_file}: written at step {manifest.step}, but the folder is "
                              f"{path.name}: a checkpoint renamed or copied from another step; "
                              "nothing was loaded")
    return manifest


def read_manifest(path: str | os.PathLike) -> Manifest:
    """The ``Manifest`` of the checkpoint at ``path``: step, run record and digests, checked
    for itself (checksum, step) but not yet against the files.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    path = Path(path)
    return _manifest_of(path, _read_metadata(path))


def _check_files(path: Path, metadata: Metadata) -> None:
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for name, size in sorted(needed.items()):
        shard = path / name
        if not shard.is_file():
            raise CheckpointError(f"{shard}: shard file missing (named in {path / '.metadata'})")
        if shard.stat().st_size < size:
            raise CheckpointError(f"{shard}: truncated ({shard.stat().st_size} bytes, "
                                  f"{path / '.metadata'} needs {size})")


def _check_digests(path: Path, metadata: Metadata, manifest: Manifest) -> None:
    named = {info.relative_path for info in (metadata.storage_data or {}).values()}
    for name in sorted(named - set(manifest.digests)):
        raise CheckpointError(f"{path / name}: named in .metadata but not in its digests")
    for name, expected in sorted(manifest.digests.items()):
        shard = path / name
        if not shard.is_file():
            raise CheckpointError(f"{shard}: shard file missing (named in the digests of "
                                  f"{path / '.metadata'})")
        actual = file_sha256(shard)
        if actual != expected:
            raise CheckpointError(
                f"{shard}: its bytes are not those written at step {manifest.step} (sha256 "
                f"{actual[:12]}..., {path / '.metadata'} recorded {expected[:12]}...): the file "
                "was damaged, or swapped in from another step or another run; nothing was loaded")


def _check_run(path: Path, manifest: Manifest, run: Mapping[str, object]) -> None:
    differ = [f"{key} {manifest.run.get(key)!r} there, {value!r} here" for key, value in run.items()
              if manifest.run.get(key) != value]
    if differ:
        raise CheckpointError(f"{path / '.metadata'}: written by another run ({'; '.join(differ)});"
                              " nothing was loaded")


def _flat(state: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= _flat(value, f"{name}.")
        else:
            out[name] = value
    return out


def _check_shapes(path: Path, stored: dict, state: dict) -> None:
    wanted = {k: v for k, v in _flat({"model": state["model"]}).items() if torch.is_tensor(v)}
    missing = sorted(set(wanted) - set(stored))
    wrong = [(k, tuple(stored[k].size), tuple(v.shape)) for k, v in wanted.items()
             if k in stored and isinstance(stored[k], TensorStorageMetadata)
             and tuple(stored[k].size) != tuple(v.shape)]
    if missing or wrong:
        detail = (f"missing {missing[:3]}" if missing else
                  f"{wrong[0][0]} is {wrong[0][1]} there but {wrong[0][2]} here")
        raise CheckpointError(f"{path / '.metadata'}: written for another model ({detail}); "
                              "nothing was loaded")


def check_checkpoint(path: str | os.PathLike, state: dict, *,
                     run: Mapping[str, object] | None = None) -> Manifest:
    """Raise ``CheckpointError`` unless ``path`` is a complete, intact checkpoint that fits ``state``.

    Checks, without loading anything: ``.metadata`` exists and reads; every file it names
    exists and is long enough; the manifest is intact and of this folder's step; every
    file's sha256 is the one recorded when it was written; the run record holds ``run``'s
    values (e.g. ``{"run_id": ...}``); every tensor of ``state["model"]`` is there, with the
    same shape. Every rank may call it: it reads the same files and reaches the same verdict.

    Returns:
        The checkpoint's ``Manifest``.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    path = Path(path)
    metadata = _read_metadata(path)
    _check_files(path, metadata)
    manifest = _manifest_of(path, metadata)
    _check_digests(path, metadata, manifest)
    _check_run(path, manifest, run or {})
    _check_shapes(path, metadata.state_dict_metadata, state)
    return manifest
