"""Train SmallCNN (or ``--model``) with FSDP2 (``fully_shard``) or DDP, with distributed checkpoints.

One process (plain python; no process group, nothing sharded)::

    python -m common.fsdp.train --num-epochs 3 --batch-size 64 --checkpoint runs/fsdp/ckpt

Two processes on this machine (gloo on CPUs, NCCL on GPUs; --batch-size is the global batch)::

    torchrun --standalone --nproc_per_node=2 -m common.fsdp.train --strategy fsdp \
        --checkpoint runs/fsdp/ckpt --save-final runs/fsdp/model.pt --log-file runs/fsdp/log.jsonl

Two nodes (run on each; the checkpoint folder must be on a file system both see)::

    export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=node0:29500 \
        --rdzv-id=job42 --max-restarts=3 -m common.fsdp.train --strategy fsdp --bf16 \
        --checkpoint /shared/runs/ckpt

``--checkpoint DIR`` resumes from the newest complete ``DIR/step-NNNNNN`` — written by any
number of ranks, with either strategy — and writes new ones atomically (``--async-save``: in
the background, with ``dcp.async_save``). The training loader is a ``StatefulDataLoader``
whose per-rank state goes into the checkpoint; a resume on another world size or another
``--num-workers`` uses the position instead (``common.fsdp.loader``). ``--compile`` runs the
model through ``torch.compile``. ``--tiny`` is the configuration the tests use; the
settings are ``common.fsdp.config.FSDPTrainConfig``.

A resume keeps the DDP trainer's contract (``common.fsdp.resume``): the settings outside
``RESUME_MAY_CHANGE`` and the data must be the checkpoint's, each difference named; every
file is verified against the digests written with it; one run writes into a ``--checkpoint``
folder at a time (``DIR/writer.lock``, ``common.fsdp.lock``); and the ranks of a job, elastic
agents included, must have been started with the same settings.

``--data DIR`` is the shapes layout or an ImageFolder root, or ``--train-csv``, ``--train-images``,
``--val-csv`` and ``--val-images`` the guide's annotations CSVs (``common.images.layouts``); ``--model``
is ``small_cnn`` or a torchvision classifier, its BatchNorm2d layers made GroupNorm.
"""

from __future__ import annotations

import itertools
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy

from common.ddp.data import build_loaders
from common.ddp.launch import restart_hazard
from common.ddp.normalization import run_statistics
from common.ddp.optim import build_optimizer, build_scheduler
from common.ddp.process_group import (
    DistInfo,
    all_reduce_sum,
    gather_objects,
    is_main_process,
    run_in_process_group,
    wrap_model,
)
from common.ddp.run_log import RunLog, finish_run
from common.ddp.trainer import save_final_weights
from common.device import seed_everything
from common.fast.cache import CacheError
from common.fsdp.checkpoint import CheckpointError
from common.fsdp.config import RANK_MAY_DIFFER, FSDPTrainConfig, parse_config
from common.fsdp.elastic import agree_on_settings
from common.fsdp.loader import stateful_loader
from common.fsdp.lock import release_lock
from common.fsdp.resume import claim_on_rank0, plain_settings
from common.fsdp.run_state import Run
from common.fsdp.sharding import local_bytes, shard_model
from common.images.layouts import data_identity, resolve_data
from common.models import SMALL_CNN, check_input_size, create_model, groupnorm_only, load_weights


def build_model(config: FSDPTrainConfig, info: DistInfo, num_classes: int) -> nn.Module:
    """``--model`` with GroupNorm (and ``--weights``) on this rank's device: sharded (FSDP),
    wrapped (DDP), or plain.

    GroupNorm, not BatchNorm: it keeps no per-rank batch statistics, so any number of ranks
    computes the gradient of the same global batch. A torchvision model's BatchNorm2d layers
    are replaced too; one with another batch norm is refused (``groupnorm_only``).

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    torch.manual_seed(config.seed)  # the same initial weights on every rank
    model = groupnorm_only(create_model(config.model, num_classes, width=config.width),
                           name=config.model)
    if config.weights:
        load_weights(model, config.weights)
    if config.model != SMALL_CNN:
        check_input_size(model, config.image_size, name=config.model)
    model = model.to(info.device)
    if not info.initialized:
        return model
    if config.strategy == "ddp":
        return wrap_model(model, info)
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if config.bf16 else None)
    return shard_model(model, reshard_after_forward=config.reshard_after_forward, mp_policy=policy)


def gradient_sync(model: nn.Module, sync: bool):
    """A context in which backward reduces gradients across ranks only if ``sync``.

    DDP skips its all-reduce inside ``no_sync()``; FSDP2 skips its reduce-scatter after
    ``set_requires_gradient_sync(False)``.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(sync)
        return nullcontext()
    if hasattr(model, "no_sync") and not sync:
        return model.no_sync()
    return nullcontext()


def _after_step(run: Run, batch_index: int) -> None:
    config, step = run.config, run.position["step"]
    if config.checkpoint_every and step % config.checkpoint_every == 0:
        run.checkpoint()
    if step == config.simulate_kill_at_step and run.log.attempt == 0 and not config.kill_in_save:
        run.die("after_step")
    if config.step_delay:
        time.sleep(config.step_delay)


def train_epoch(run: Run, loader, epoch: int) -> dict[str, float]:
    """Train from ``run.position`` to the end of ``epoch`` (or ``--max-steps``).

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    config, device, accum = run.config, run.info.device, run.config.grad_accum
    run.model.train()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, samples
    start = run.position["batch_in_epoch"]
    per_epoch = loader.sampler.num_samples // loader.batch_size // accum * accum
    batch_index, waited = start, time.perf_counter()
    for images, labels in itertools.islice(loader, per_epoch - start):
        run.timing.wait += time.perf_counter() - waited
        images, labels = images.to(device), labels.to(device)
        batch_index += 1
        sync = batch_index % accum == 0
        with gradient_sync(run.model, sync):
            logits = run.forward(images)
            loss = nn.functional.cross_entropy(logits, labels)
            (loss / accum).backward()
        sums += torch.stack([loss.detach() * labels.size(0), (logits.argmax(1) == labels).sum(),
                             torch.tensor(labels.size(0), device=device)]).double()
        if sync:
            run.optimizer.step()
            run.scheduler.step()
            run.memory = local_bytes(run.model, run.optimizer)  # before the gradients go
            run.optimizer.zero_grad(set_to_none=True)
            run.position = {"epoch": epoch, "step": run.position["step"] + 1,
                            "batch_in_epoch": batch_index}
            run.timing.step_done(run.position["step"])
            _after_step(run, batch_index)
            if 0 < config.max_steps <= run.position["step"]:
                break
        waited = time.perf_counter()
    loss_sum, correct, seen = all_reduce_sum(sums).tolist()
    return {"train_loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1)}


def _most_over_ranks(count: int, device: torch.device) -> int:
    value = torch.tensor([count], device=device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return int(value.item())


@torch.no_grad()
def evaluate(model: nn.Module, loader, device: torch.device, *, image_size: int) -> dict[str, float]:
    """Validation loss and accuracy, each sample counted once over all ranks.

    Under FSDP every forward is a collective (it all-gathers parameters), so every rank must
    run the same number of them: a rank with fewer batches runs forwards on a dummy batch
    and discards the result.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    model.eval()
    batches = list(loader)
    most = _most_over_ranks(len(batches), device)
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    dummy = torch.zeros(1, 3, image_size, image_size, device=device)
    for index in range(most):
        if index >= len(batches):
            model(dummy)
            continue
        images, labels = batches[index][0].to(device), batches[index][1].to(device)
        logits = model(images)
        loss = nn.functional.cross_entropy(logits.float(), labels, reduction="sum")
        sums += torch.stack([loss, (logits.argmax(1) == labels).sum(),
                             torch.tensor(labels.size(0), device=device)]).double()
    loss_sum, correct, seen = all_reduce_sum(sums).tolist()
    return {"val_loss": loss_sum / max(seen, 1), "val_acc": correct / max(seen, 1)}


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's ``state_dict`` on rank 0's CPU (gathered from the shards under FSDP).

    Every rank must call it (it all-gathers); the other ranks get an empty dict.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)


def train(config: FSDPTrainConfig, info: DistInfo) -> Run:
    """Build everything, resume from ``--checkpoint`` if it holds one, train, save.

    First the ranks agree on the settings (an elastic guest with other flags is refused on
    every rank), then rank 0 takes the ``--checkpoint`` folder's lock, held until the end.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    agree_on_settings(plain_settings(config), may_differ=RANK_MAY_DIFFER)
    run_id = claim_on_rank0(config.checkpoint, info) if config.checkpoint else ""
    try:
        return _train(config, info, run_id)
    finally:
        if config.checkpoint and info.rank == 0:
            release_lock(config.checkpoint)


def _train(config: FSDPTrainConfig, info: DistInfo, run_id: str) -> Run:
    if config.bf16 and info.device.type != "cuda":
        raise ValueError("--bf16 (MixedPrecisionPolicy) is GPU-only here; this process runs on "
                         "the CPU")
    if config.threads:
        torch.set_num_threads(config.threads)
    seed_everything(config.seed)
    data = resolve_data(config)
    train_loader, val_loader = build_loaders(config, info, data)
    train_loader = stateful_loader(train_loader)
    model = build_model(config, info, len(data.classes))
    optimizer = build_optimizer(config, model)
    steps_per_epoch = len(train_loader) // config.grad_accum
    scheduler = build_scheduler(config, optimizer, config.num_epochs * steps_per_epoch)
    forward = torch.compile(model) if config.compile else model
    run = Run(config, info, model, forward, optimizer, scheduler, RunLog(config.log_file, info),
              train_loader, run_id=run_id, identity=data_identity(data))
    if config.async_save and info.initialized:
        run.save_group = dist.new_group(backend="gloo")  # async_save needs a CPU backend
    if restart_hazard() and is_main_process():
        print(f"warning: {restart_hazard()}", file=sys.stderr, flush=True)
    run.log.write("start", world_size=info.world_size, strategy=config.strategy,
                  device=str(info.device), steps_per_epoch=steps_per_epoch, config=asdict(config),
                  run_id=run_id, layout=data.kind, classes=list(data.classes),
                  normalization=run_statistics(config, data), pixels=data.pixels)
    run.resume(steps_per_epoch)
    first_step = run.position["step"]
    for epoch in range(run.position["epoch"], config.num_epochs):
        if 0 < config.max_steps <= run.position["step"]:
            break
        start = run.position["batch_in_epoch"] if epoch == run.position["epoch"] else 0
        train_loader.dataset.set_epoch(epoch)
        if start and run.loader_state is not None:  # resumed mid-epoch, same world size
            train_loader.sampler.set_epoch(epoch)
            train_loader.load_state_dict(run.loader_state)
        else:  # a new epoch, or resumed on another world size: skip by position
            train_loader.sampler.set_epoch(epoch, start=start * train_loader.batch_size)
        run.loader_state = None
        run.position = {"epoch": epoch, "step": run.position["step"], "batch_in_epoch": start}
        metrics = train_epoch(run, train_loader, epoch)
        if run.position["batch_in_epoch"] < steps_per_epoch * config.grad_accum:  # stopped by --max-steps
            if not (config.checkpoint_every and run.position["step"] % config.checkpoint_every == 0):
                run.checkpoint()  # unless _after_step has just saved this very step
            break
        metrics |= evaluate(forward, val_loader, info.device, image_size=config.image_size)
        run.position = {"epoch": epoch + 1, "step": run.position["step"], "batch_in_epoch": 0}
        run.log.write("epoch", epoch=epoch + 1, step=run.position["step"], **metrics)
        run.checkpoint()
    run.publish()
    save_final_weights(full_state_dict(model), config.save_final)
    finish_run(run.log, run.timing,
               step=run.position["step"], first_step=first_step, world_size=info.world_size,
               batch_size=config.batch_size, strategy=config.strategy,
               bytes_per_rank=gather_objects(run.memory))
    return run


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.fsdp.train`` and ``torchrun ... -m common.fsdp.train``.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    return run_in_process_group(train, parse_config(argv),
                                errors=(CheckpointError, CacheError, FileNotFoundError,
                                        ValueError))


if __name__ == "__main__":
    raise SystemExit(main())
