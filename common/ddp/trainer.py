"""The DDP trainer as a library: what ``python -m common.ddp.train`` runs, step by step.

``common.ddp.train`` is its command line (``main``: the flags, then :func:`run_training`);
``common.ddp.bench`` calls :func:`run_training` in its own process for its single-rank runs.
The steps are named as in torchvision's reference scripts: ``build_model``, an epoch function
(``distributed_train_epoch``), an evaluation function (``distributed_evaluate``), ``resume``
and ``train``; the settings are ``common.ddp.config.TrainConfig``.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

from common.ddp.config import RESUME_MAY_CHANGE, TrainConfig
from common.ddp.data import build_loaders
from common.ddp.hooks import AllReduceCounter, counting_allreduce_hook
from common.ddp.launch import restart_hazard
from common.ddp.normalization import run_statistics
from common.ddp.optim import build_optimizer, build_scheduler, rebuild_scheduler
from common.ddp.process_group import (
    DistInfo,
    all_reduce_sum,
    is_main_process,
    run_in_process_group,
    unwrap,
    wrap_model,
)
from common.ddp.run_log import RunLog, Timing, finish_run
from common.ddp.snapshot import (
    Position,
    SnapshotError,
    atomic_save,
    check_resume,
    load_snapshot,
    read_snapshot,
    save_snapshot,
)
from common.device import seed_everything
from common.fast.cache import CacheError
from common.images.layouts import data_identity, resolve_data
from common.models import (
    SMALL_CNN,
    check_input_size,
    create_model,
    groupnorm_only,
    load_weights,
)


def build_model(config: TrainConfig, info: DistInfo, num_classes: int) -> nn.Module:
    """``--model`` with the chosen normalisation (and ``--weights``), on this rank's device,
    DDP-wrapped if distributed.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    torch.manual_seed(config.seed)  # the same initial weights everywhere (DDP also broadcasts them)
    model = create_model(config.model, num_classes, width=config.width)
    if config.norm == "group":
        groupnorm_only(model, name=config.model)
    elif config.norm == "syncbatch":
        if info.device.type != "cuda":
            raise ValueError("--norm syncbatch needs CUDA (SyncBatchNorm has no CPU kernel); "
                             "use --norm group for exact multi-process equivalence on CPUs")
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    if config.weights:
        load_weights(model, config.weights)
    if config.model != SMALL_CNN:
        check_input_size(model, config.image_size, name=config.model)
    return wrap_model(model.to(info.device), info)


@dataclass
class Run:
    """What ``distributed_train_epoch`` and ``train`` share while a run goes on.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    config: TrainConfig
    info: DistInfo
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    log: RunLog
    position: Position = Position()
    timing: Timing = field(default_factory=Timing)
    identity: dict = field(default_factory=dict)  # the data (common.images.layouts.data_identity)

    def snapshot(self) -> None:
        if self.config.snapshot:
            save_snapshot(self.config.snapshot, model=self.model, optimizer=self.optimizer,
                          scheduler=self.scheduler, position=self.position,
                          settings=asdict(self.config), identity=self.identity)
            self.log.write("snapshot", **asdict(self.position))

    def stop_requested(self) -> bool:
        return 0 < self.config.max_steps <= self.position.step


def _after_step(run: Run) -> None:
    config, step = run.config, run.position.step
    if config.snapshot_every and step % config.snapshot_every == 0:
        run.snapshot()
    if step == config.simulate_failure_at_step and run.log.attempt == 0:
        run.log.write("simulated_failure", step=step, rank=run.info.world_size - 1)
        if run.info.rank == run.info.world_size - 1:
            os._exit(17)  # die like a crashed worker: no cleanup, no exception handling
    if config.step_delay:
        time.sleep(config.step_delay)


def distributed_train_epoch(run: Run, loader: DataLoader, epoch: int) -> dict[str, float]:
    """Train from ``run.position`` to the end of ``epoch`` (or ``--max-steps``).

    Returns:
        Training loss, accuracy and sample count of this pass, summed over all ranks.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    config, model, device = run.config, run.model, run.info.device
    accum, loss_fn = config.grad_accum, nn.CrossEntropyLoss()
    model.train()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, samples
    micro_per_epoch = len(loader.sampler) // loader.batch_size // accum * accum + run.position.batch_in_epoch
    batches = itertools.islice(loader, micro_per_epoch - run.position.batch_in_epoch)
    batch_index, waited = run.position.batch_in_epoch, time.perf_counter()
    for images, labels in batches:
        run.timing.wait += time.perf_counter() - waited
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        batch_index += 1
        sync = batch_index % accum == 0
        # no_sync: accumulate locally; the all-reduce runs once, in the last micro-batch's backward.
        with nullcontext() if sync or not run.info.initialized else model.no_sync():
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.amp):
                logits = model(images)
                loss = loss_fn(logits, labels)
            (loss / accum).backward()
        sums += torch.stack([loss.detach() * labels.size(0),
                             (logits.argmax(1) == labels).sum(), torch.tensor(labels.size(0))
                             .to(device)]).double()
        if sync:
            run.optimizer.step()
            run.optimizer.zero_grad(set_to_none=True)
            run.scheduler.step()
            run.position = Position(epoch, run.position.step + 1, batch_index)
            run.timing.step_done(run.position.step)
            if run.timing.steps == 1:  # the launch's time to train (python -m common.ddp.first_step)
                run.log.write("first_step", step=run.position.step,
                              cpu_s=round(time.process_time(), 3))  # this process's, imports included
            _after_step(run)
            if run.stop_requested():
                break
        waited = time.perf_counter()
    loss_sum, correct, seen = all_reduce_sum(sums).tolist()
    return {"train_loss": loss_sum / seen if seen else float("nan"),
            "train_acc": correct / seen if seen else float("nan"), "train_count": int(seen)}


@torch.no_grad()
def distributed_evaluate(model: nn.Module, loader: DataLoader, device: torch.device, *,
             amp: bool = False) -> dict[str, float]:
    """Validation loss and accuracy, each sample counted exactly once over all ranks.

    Runs the plain model (not the DDP wrapper): ranks may hold different numbers of
    batches, and no collective may run per batch. One all-reduce of the sums at the end.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    model = unwrap(model).eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(images)
        loss = nn.functional.cross_entropy(logits.float(), labels, reduction="sum")
        sums += torch.stack([loss, (logits.argmax(1) == labels).sum(),
                             torch.tensor(labels.size(0), device=device)]).double()
    loss_sum, correct, seen = all_reduce_sum(sums).tolist()
    return {"val_loss": loss_sum / seen, "val_acc": correct / seen, "val_count": int(seen)}


def resume(run: Run, steps_per_epoch: int) -> None:
    """Continue ``run`` from its ``--snapshot``: everything is checked before anything changes.

    Settings outside ``RESUME_MAY_CHANGE`` must equal the snapshot's, and so must the data
    (its class list and files, ``run.identity``). A changed ``--num-epochs`` rebuilds the
    schedule for the new length (``rebuild_scheduler``).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    config = run.config
    snapshot = read_snapshot(config.snapshot)
    rebuild = check_resume(config.snapshot, snapshot, asdict(config), may_change=RESUME_MAY_CHANGE,
                           identity=run.identity)
    saved_epochs = snapshot["settings"].get("num_epochs")
    run.position = load_snapshot(config.snapshot, model=run.model, optimizer=run.optimizer,
                                 scheduler=None if rebuild else run.scheduler, rank=run.info.rank,
                                 snapshot=snapshot)
    if rebuild:
        run.scheduler = rebuild_scheduler(config, run.optimizer,
                                          config.num_epochs * steps_per_epoch, run.position.step)
    run.log.write("resume", snapshot=config.snapshot, **asdict(run.position),
                  num_epochs=[saved_epochs, config.num_epochs] if rebuild else config.num_epochs)


def save_final_weights(weights: dict | None, path: str | os.PathLike) -> None:
    """The end of a training run: rank 0 writes the model's ``state_dict`` to ``path`` atomically.

    Nothing happens without a ``path`` (``--save-final`` not given) or on other ranks; the
    FSDP trainer saves its gathered full state dict with it too.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if path and weights is not None and is_main_process():
        atomic_save(weights, path)


def train(config: TrainConfig, info: DistInfo) -> Run:
    """Build everything, resume from ``--snapshot`` if it exists, train, save.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if config.amp and info.device.type != "cuda":
        raise ValueError("--amp (bfloat16 autocast) is for CUDA; this process runs on the CPU")
    if config.threads:
        torch.set_num_threads(config.threads)
    seed_everything(config.seed)
    data = resolve_data(config)
    train_loader, val_loader = build_loaders(config, info, data)
    model = build_model(config, info, len(data.classes))
    optimizer = build_optimizer(config, model)
    # The schedule spans all epochs, whatever --max-steps says, so a stopped run can go on.
    steps_per_epoch = len(train_loader) // config.grad_accum
    scheduler = build_scheduler(config, optimizer, config.num_epochs * steps_per_epoch)
    run = Run(config, info, model, optimizer, scheduler, RunLog(config.log_file, info),
              identity=data_identity(data))
    if restart_hazard() and is_main_process():
        print(f"warning: {restart_hazard()}", file=sys.stderr, flush=True)
    run.log.write("start", world_size=info.world_size, backend=info.backend,
                  device=str(info.device), steps_per_epoch=steps_per_epoch, config=asdict(config),
                  layout=data.kind, classes=list(data.classes),
                  normalization=run_statistics(config, data), pixels=data.pixels)
    if config.snapshot and Path(config.snapshot).exists():
        resume(run, steps_per_epoch)
    counter = AllReduceCounter()
    if config.count_allreduces and info.initialized:
        model.register_comm_hook(counter, counting_allreduce_hook)
    first_step = run.position.step
    for epoch in range(run.position.epoch, config.num_epochs):
        if run.stop_requested():
            break
        started = time.perf_counter()
        start = run.position.batch_in_epoch if epoch == run.position.epoch else 0
        train_loader.sampler.set_epoch(epoch, start=start * train_loader.batch_size)
        train_loader.dataset.set_epoch(epoch)
        run.position = Position(epoch, run.position.step, start)
        metrics = distributed_train_epoch(run, train_loader, epoch)
        if run.stop_requested() and run.position.batch_in_epoch < len(train_loader) // \
                config.grad_accum * config.grad_accum:
            run.snapshot()
            break
        metrics |= distributed_evaluate(model, val_loader, info.device, amp=config.amp)
        run.position = Position(epoch + 1, run.position.step, 0)
        run.log.write("epoch", epoch=epoch + 1, step=run.position.step,
                      seconds=round(time.perf_counter() - started, 3), **metrics)
        run.snapshot()
    save_final_weights(unwrap(model).state_dict(), config.save_final)
    finish_run(run.log, run.timing, step=run.position.step, first_step=first_step,
               world_size=info.world_size, batch_size=config.batch_size,
               allreduce_syncs=counter.syncs, allreduce_calls=counter.bucket_calls)
    return run


#: What ``run_training`` reports as one line (exit status 1) instead of a traceback.
TRAIN_ERRORS = (SnapshotError, CacheError, FileNotFoundError, ValueError)


def run_training(config: TrainConfig) -> int:
    """Train with ``config`` in the process group ``torchrun`` describes (or alone); an exit code.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return run_in_process_group(train, config, errors=TRAIN_ERRORS)
