"""Distributed checkpoints (``torch.distributed.checkpoint``, DCP): atomic, validated, reshardable.

A checkpoint is a folder ``step-NNNNNN`` holding one ``__R_0.distcp`` file per writing rank
and a ``.metadata`` file that says which byte range of which file holds which piece of which
tensor. Loading reads those pieces into whatever sharding the loading ranks have, so a
checkpoint written by 2 ranks loads on 1 or on 3 (resharding). Every rank calls these
functions; DCP coordinates them.

Saves are atomic: DCP writes into a hidden ``.step-NNNNNN.tmp`` folder, and only when every
rank has finished does rank 0 rename it to ``step-NNNNNN``. A run killed mid-save leaves its
previous checkpoint, untouched, as the newest complete one. ``async_save_checkpoint`` does the
same with ``dcp.async_save``: the files are written while training goes on, and published by
``PendingSave.wait()`` once they are complete.

Every save records each file's sha256, its step and the run's record in ``.metadata``
(``common.fsdp.integrity``), and every load checks them before it reads a tensor.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from common.fsdp.integrity import (
    STEP_DIR,
    CheckpointError,
    DigestingWriter,
    check_checkpoint,
    read_manifest,
)

__all__ = ["STEP_DIR", "CheckpointError", "PendingSave", "async_save_checkpoint",
           "check_checkpoint", "check_one_run", "checkpoint_dirs", "from_torch_save",
           "latest_checkpoint", "load_checkpoint", "read_manifest", "save_checkpoint",
           "to_torch_save", "training_state"]


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _barrier() -> None:
    if _distributed():
        dist.barrier()


def _rank() -> int:
    return dist.get_rank() if _distributed() else 0


@contextmanager
def _quiet_single_process():
    """DCP warns that it "assumes a single process" without a process group: that is intended."""
    with warnings.catch_warnings():
        if not _distributed():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def checkpoint_dirs(root: str | os.PathLike) -> list[Path]:
    """The complete checkpoints under ``root`` (``step-NNNNNN`` folders), oldest first.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and STEP_DIR.match(p.name)),
                  key=lambda p: int(STEP_DIR.match(p.name).group(1)))


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint under ``root``, or ``None``.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    found = checkpoint_dirs(root)
    return found[-1] if found else None


def training_state(model: nn.Module, optimizer: torch.optim.Optimizer,
                   extra: dict | None = None) -> dict:
    """``{"model": ..., "optim": ..., "extra": ...}`` from ``get_state_dict``: sharded
    DTensors under FSDP, full tensors under DDP or one process, fully-qualified names.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state, "extra": dict(extra or {})}


def _fresh_tmp(root: Path, step: int) -> tuple[Path, Path]:
    final, tmp = root / f"step-{step:06d}", root / f".step-{step:06d}.tmp"
    if _rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # left by a writer killed mid-save
        tmp.mkdir()
    _barrier()
    return final, tmp


def _publish(final: Path, tmp: Path, keep: int) -> Path:
    _barrier()  # every rank has written its files
    if _rank() == 0:
        old = final.parent / f".{final.name}.old"
        if final.exists():  # the same step saved again after a restart
            final.rename(old)
        tmp.rename(final)  # the atomic step: the checkpoint exists complete, or not at all
        shutil.rmtree(old, ignore_errors=True)
        for stale in checkpoint_dirs(final.parent)[:-max(keep, 1)]:
            shutil.rmtree(stale)
    _barrier()
    return final


def check_one_run(root: str | os.PathLike) -> str:
    """The run id that every complete checkpoint under ``root`` records (``""`` for none).

    Raises:
        CheckpointError: Checkpoints of two runs share the folder (naming each run's newest).

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    runs: dict[str, str] = {}  # run id -> its newest checkpoint
    for path in checkpoint_dirs(root):
        runs[str(read_manifest(path).run.get("run_id", ""))] = path.name
    if len(runs) > 1:
        listed = ", ".join(f"{name} (run {run or 'unnamed'})" for run, name in runs.items())
        raise CheckpointError(f"{root}: holds checkpoints of {len(runs)} runs: {listed}. Two "
                              "runs wrote into one --checkpoint folder; move one run's "
                              "step-NNNNNN folders elsewhere and resume each from its own")
    return next(iter(runs), "")


def save_checkpoint(root: str | os.PathLike, step: int, *, model: nn.Module,
                    optimizer: torch.optim.Optimizer, extra: dict | None = None, keep: int = 2,
                    on_written: Callable[[Path], None] | None = None,
                    run: Mapping[str, object] | None = None) -> Path:
    """Write ``root/step-NNNNNN`` atomically on every rank; keep the newest ``keep``.

    Args:
        root: The checkpoint folder (shared by all ranks: a local disk on one machine,
            a shared file system across machines).
        step: The optimizer step the state belongs to.
        model, optimizer: Sharded (FSDP) or not (DDP, one process).
        extra: Small picklable values (loader position, scheduler state, RNG tensors).
        keep: How many complete checkpoints to leave (at least 1).
        on_written: Called on every rank after DCP wrote the hidden folder and before
            it is published; the tests and the chapter use it to kill a run mid-save.
        run: Plain values recorded with the digests (run id, settings, data, position),
            read back with ``read_manifest``.

    Returns:
        The published folder.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    final, tmp = _fresh_tmp(Path(root), step)
    with _quiet_single_process():
        dcp.save(training_state(model, optimizer, extra),
                 storage_writer=DigestingWriter(tmp, step=step, run=run))
    if on_written is not None:
        on_written(tmp)
    return _publish(final, tmp, keep)


@dataclass
class PendingSave:
    """A checkpoint that ``dcp.async_save`` is still writing; ``wait()`` publishes it.

    Attributes:
        final, tmp: The folder it will be published as, and the hidden one DCP writes into.
        future: DCP's future; done when every rank's files and ``.metadata`` are written.
        blocking_s: How long ``async_save_checkpoint`` held up its caller (the copy of the
            state into CPU memory); the rest of the save overlaps training.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """

    final: Path
    tmp: Path
    future: Future
    keep: int
    blocking_s: float
    on_written: Callable[[Path], None] | None = None

    def wait(self) -> Path:
        """Block until the files are written, then publish (rename) them; every rank calls it.

        A failed write raises here, and nothing is published.
        """
        self.future.result()
        if self.on_written is not None:
            self.on_written(self.tmp)
        return _publish(self.final, self.tmp, self.keep)


def async_save_checkpoint(root: str | os.PathLike, step: int, *, model: nn.Module,
                          optimizer: torch.optim.Optimizer, extra: dict | None = None,
                          keep: int = 2, process_group: dist.ProcessGroup | None = None,
                          on_written: Callable[[Path], None] | None = None,
                          run: Mapping[str, object] | None = None) -> PendingSave:
    """Start writing ``root/step-NNNNNN`` in the background (``dcp.async_save``); every rank calls it.

    ``dcp.async_save`` copies the state into CPU memory (staging) before it returns, so
    training may change the parameters at once; a thread then plans and writes the files.
    Nothing is published until ``PendingSave.wait()``: a run killed before then leaves its
    previous checkpoint as the newest complete one, as with ``save_checkpoint``. Call
    ``wait()`` before the next save and before the run ends.

    Args:
        process_group: The group the writing thread coordinates over. Pass a group of its
            own (``dist.new_group(backend="gloo")``): the thread's collectives must not
            interleave with the training's on the default group.
        Others: As for ``save_checkpoint``.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    final, tmp = _fresh_tmp(Path(root), step)
    if not _distributed():
        # The writing thread warns after this call returns, so no context manager can scope
        # the filter; it matches only DCP's "assuming a single process" notice.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    started = time.perf_counter()
    future = dcp.async_save(training_state(model, optimizer, extra),
                            storage_writer=DigestingWriter(tmp, step=step, run=run),
                            process_group=process_group)
    return PendingSave(final, tmp, future, keep, time.perf_counter() - started, on_written)


def load_checkpoint(path: str | os.PathLike, *, model: nn.Module,
                    optimizer: torch.optim.Optimizer, extra: dict | None = None,
                    run: Mapping[str, object] | None = None,
                    check_extra: Callable[[dict], None] | None = None) -> dict:
    """Load a checkpoint into ``model`` and ``optimizer`` in place, on every rank.

    The checkpoint is checked first (``check_checkpoint``: files, digests, step, run,
    shapes): a bad one raises ``CheckpointError`` naming the file, and nothing is changed.
    Then the extra values are read, and ``check_extra`` may refuse them, still before the
    model and the optimizer are touched. Works for any number of loading ranks and either
    strategy: DCP reads each rank's pieces (resharding).

    Args:
        extra: A template of the extra values to read (same keys as were saved).
        run: Values the checkpoint's run record must hold (e.g. ``{"run_id": ...}``).
        check_extra: Called with the extra values read; raises to refuse them. Under a
            process group it must raise on every rank or on none (gather the verdict).

    Returns:
        The extra values, read from the checkpoint.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    state = training_state(model, optimizer, extra)
    check_checkpoint(path, state, run=run)
    with _quiet_single_process():
        if state["extra"]:
            dcp.load({"extra": state["extra"]}, checkpoint_id=Path(path))
        if check_extra is not None:
            check_extra(state["extra"])
        dcp.load({"model": state["model"], "optim": state["optim"]}, checkpoint_id=Path(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    return state["extra"]


def to_torch_save(path: str | os.PathLike, out: str | os.PathLike) -> Path:
    """A DCP checkpoint as one ``torch.save`` file (full tensors), e.g. for inference.

    Runs in one plain process, no process group. ``torch.load(out)["model"]`` is then an
    ordinary ``state_dict``.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    check_checkpoint(path, {"model": {}})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    dcp_to_torch_save(Path(path), out)
    return out


def from_torch_save(file: str | os.PathLike, out: str | os.PathLike) -> Path:
    """A ``torch.save`` file of full tensors as a DCP checkpoint folder (the way back).

    What ``torch_save_to_dcp`` does, written with digests (``step`` ``None``: no step of a
    run), so that ``load_checkpoint`` can verify it too. Runs in one plain process.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    out = Path(out)
    if out.exists():
        raise CheckpointError(f"{out}: exists; refusing to overwrite it")
    state = torch.load(file, weights_only=False)  # as torch_save_to_dcp: a file of one's own
    with _quiet_single_process():
        dcp.save(state, storage_writer=DigestingWriter(out, step=None,
                                                       run={"converted_from": str(file)}),
                 no_dist=True)
    return out
