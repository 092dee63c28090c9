"""Chapter 6: beyond DDP — sharding the model with FSDP2, distributed checkpoints, compile.

Modules: ``sharding`` (``shard_model`` with ``fully_shard``, DTensor placements, bytes per
rank from the local shards, ZeRO stages on paper), ``meta`` (a model built on the meta device,
filled by each module's ``reset_parameters`` or from rank 0's full state dict), ``checkpoint``
(atomic, validated DCP checkpoints that load on any number of ranks, also written with
``dcp.async_save``;
conversion to and from ``torch.save``), ``integrity`` (the digests, step and run record written
into every checkpoint's ``.metadata`` and checked before loading), ``lock`` (one writer per
checkpoint folder), ``loader`` (the ``StatefulDataLoader`` whose per-rank state goes into the
checkpoint), ``resume`` (the resume contract: settings, data, loader state), ``run_state``
(``Run``: a run's position and its checkpoints), ``compilation`` (chapter 6.3's timing of eager
and ``torch.compile``d functions side by side), ``elastic`` (``torchrun --nnodes=1:2`` agents
that join a run, and agree on its settings), ``config`` (``FSDPTrainConfig``), and the entry points
``train`` (``python -m common.fsdp.train``) and ``bench`` (``make bench-fsdp``), which are
not imported here. Imports go one way: ``common.fsdp`` uses ``common.ddp`` and the core.
"""

from common.fsdp.checkpoint import (
    CheckpointError,
    PendingSave,
    async_save_checkpoint,
    check_checkpoint,
    checkpoint_dirs,
    from_torch_save,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    to_torch_save,
    training_state,
)
from common.fsdp.sharding import bytes_per_rank, local, local_bytes, placements, shard_model

__all__ = [
    "CheckpointError",
    "PendingSave",
    "async_save_checkpoint",
    "bytes_per_rank",
    "check_checkpoint",
    "checkpoint_dirs",
    "from_torch_save",
    "latest_checkpoint",
    "load_checkpoint",
    "local",
    "local_bytes",
    "placements",
    "save_checkpoint",
    "shard_model",
    "to_torch_save",
    "training_state",
]
