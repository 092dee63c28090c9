"""The training loader of ``common.fsdp.train``: a ``StatefulDataLoader`` whose state is checkpointed.

``torchdata.stateful_dataloader.StatefulDataLoader`` knows how far into an epoch it is (the
samples its batch sampler yielded, the workers' progress): ``state_dict()`` mid-epoch, and
``load_state_dict()`` continues from there. Each rank's loader has its own state — it walks
that rank's shard of the epoch — so each rank stores its state under its own key,
``extra.loader.rank<R>``, in the distributed checkpoint.

A per-rank state only means something for the same world size: rank 1 of 2 walked every
other sample of the shuffled epoch, which is no position of any rank of 3. When the world
size changes (2 -> 1, 2 -> 3, an elastic restart) the loader state is not used, and the run
falls back to the position ``(epoch, batch_in_epoch)``: with a fixed global batch, every rank
has consumed ``batch_in_epoch`` batches of ``batch_size / world_size`` samples, i.e. the first
``batch_in_epoch * batch_size`` samples of the epoch's order, on any number of ranks — which
``ResumableDistributedSampler.set_epoch(epoch, start=...)`` skips. The same holds when
``--num-workers`` changes: a state with workers has another shape than one without.

A state that is used must agree with that position: ``loader_state_problem`` reads how many
batches and samples it says were yielded (``_num_yielded`` and the sampler's
``samples_yielded`` without workers; the last snapshot's step and its main-process sampler
with workers) and refuses one that is not ``batch_in_epoch`` batches of this loader's batch.
"""

from __future__ import annotations

import os
import pickle
import re
import warnings
from pathlib import Path

from torch.distributed.checkpoint import FileSystemReader
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

LOADER_KEY = re.compile(r"^extra\.loader\.rank(\d+)$")


def stateful_loader(loader: DataLoader) -> StatefulDataLoader:
    """``loader`` rebuilt as a ``StatefulDataLoader``: same dataset, sampler, batches, workers.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    with warnings.catch_warnings():  # torchdata 0.11 calls the deprecated torch.set_vital
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
        return StatefulDataLoader(loader.dataset, batch_size=loader.batch_size,
                                  sampler=loader.sampler, drop_last=loader.drop_last,
                                  num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                                  pin_memory=loader.pin_memory,
                                  worker_init_fn=loader.worker_init_fn,
                                  multiprocessing_context=loader.multiprocessing_context,
                                  prefetch_factor=loader.prefetch_factor,
                                  persistent_workers=loader.persistent_workers)


def loader_entry(loader: StatefulDataLoader, rank: int) -> dict[str, bytes]:
    """``{"rank<R>": state}`` for the checkpoint's ``extra["loader"]``, the state pickled.

    Pickled into one value, so DCP stores it as one item whatever its nesting (the state
    of a loader with workers has more keys than one without).

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    return {f"rank{rank}": pickle.dumps(loader.state_dict())}


def saved_loader_ranks(path: str | os.PathLike) -> int:
    """How many ranks' loader states the checkpoint at ``path`` holds (0 for none).

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    keys = FileSystemReader(Path(path)).read_metadata().state_dict_metadata
    return sum(1 for key in keys if LOADER_KEY.match(key))


def loaded_state(entry: dict[str, bytes], rank: int) -> dict:
    """This rank's loader state from the ``extra["loader"]`` read back from a checkpoint.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    return pickle.loads(entry[f"rank{rank}"])  # our own checkpoint: DCP unpickles its values too


def _yielded(state: dict) -> tuple[int, int, int | None]:
    """``(batches, batches at the sampler's count, samples)`` a loader state says it yielded."""
    if "_snapshot" in state:  # with workers: the main process's state at the last snapshot
        snapshot = state["_snapshot"]
        main = snapshot["_main_snapshot"]
        return (snapshot["_snapshot_step"] + state["_steps_since_snapshot"],
                snapshot["_snapshot_step"], (main["_sampler_iter_state"] or {}).get("samples_yielded"))
    return (state["_num_yielded"], state["_num_yielded"],
            (state["_sampler_iter_state"] or {}).get("samples_yielded"))


def state_workers(state: dict) -> int:
    """How many workers the loader that wrote ``state`` had.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    return state["_snapshot"]["_main_snapshot"]["_num_workers"] if "_snapshot" in state else 0


def loader_state_problem(state: object, *, batches: int, batch_size: int,
                         num_workers: int) -> str:
    """Why ``state`` is not the state of a loader ``batches`` batches into its epoch (``""``: it is).

    Args:
        batches: The checkpoint's ``batch_in_epoch``: micro-batches this rank consumed.
        batch_size: This rank's loader batch (so ``batches * batch_size`` samples).
        num_workers: The workers of the loader that is to load it.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    try:
        said, counted, samples = _yielded(state)
        workers = state_workers(state)
    except (KeyError, TypeError, AttributeError) as error:
        return f"it is not a StatefulDataLoader state ({type(error).__name__}: {error})"
    if workers != num_workers:
        return f"it was written with {workers} workers, this loader has {num_workers}"
    if said != batches:
        return (f"it says {said} batches were yielded, the checkpoint's position is "
                f"{batches} batches into the epoch")
    if samples is not None and samples != counted * batch_size:
        return (f"it says {samples} samples were yielded, but {counted} batches x {batch_size} "
                f"samples make {counted * batch_size}: samples would be skipped or repeated")
    return ""
