"""What a run of ``common.fsdp.train`` carries between its steps and its checkpoints: ``Run``.

The training loop (``common.fsdp.train``) moves ``Run.position`` on; ``Run`` writes that
position with everything else a resumed run needs into a distributed checkpoint (``--async-save``:
in the background, published by ``publish``), and resumes from the newest one under the
contract of ``common.fsdp.resume``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field

import torch
from torch import nn
from torchdata.stateful_dataloader import StatefulDataLoader

from common.ddp.optim import rebuild_scheduler
from common.ddp.process_group import DistInfo, is_main_process
from common.ddp.run_log import RunLog, Timing
from common.fsdp.checkpoint import (
    PendingSave,
    async_save_checkpoint,
    latest_checkpoint,
    load_checkpoint,
    read_manifest,
    save_checkpoint,
)
from common.fsdp.config import FSDPTrainConfig
from common.fsdp.loader import loader_entry, saved_loader_ranks
from common.fsdp.resume import check_before_loading, check_extra, length_change, run_record


@dataclass
class Run:
    """What the training loop, the checkpoints and ``main`` share while a run goes on.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """

    config: FSDPTrainConfig
    info: DistInfo
    model: nn.Module
    forward: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    log: RunLog
    loader: StatefulDataLoader
    position: dict = field(default_factory=lambda: {"epoch": 0, "step": 0, "batch_in_epoch": 0})
    timing: Timing = field(default_factory=Timing)
    memory: dict = field(default_factory=dict)
    loader_state: dict | None = None  # read from a checkpoint of this world size and workers
    save_group: object = None  # the process group of --async-save's writing thread
    pending: tuple[PendingSave, dict] | None = None  # an --async-save not yet published
    run_id: str = ""  # the run's name in its checkpoints and its --checkpoint folder's lock
    identity: dict = field(default_factory=dict)  # the data (common.images.layouts.data_identity)

    def extra(self) -> dict:
        """Everything but model and optimizer that a resumed run needs."""
        return {"position": dict(self.position), "scheduler": self.scheduler.state_dict(),
                "rng": torch.get_rng_state(), "loader": loader_entry(self.loader, self.info.rank)}

    def template(self, *, with_loader: bool) -> dict:
        """What ``resume`` reads: ``extra()``'s keys, placeholders where DCP puts the values.

        Not ``extra()`` itself: ``loader.state_dict()`` before the first epoch would start
        an iterator (and workers) over a sampler not yet set to the resumed epoch.
        """
        template = {"position": dict(self.position), "scheduler": self.scheduler.state_dict(),
                    "rng": torch.get_rng_state()}
        if with_loader:
            template["loader"] = {f"rank{self.info.rank}": b""}
        return template

    def checkpoint(self) -> None:
        config = self.config
        if not config.checkpoint:
            return
        kill = (config.kill_in_save and self.position["step"] == config.simulate_kill_at_step
                and self.log.attempt == 0)
        options = {"model": self.model, "optimizer": self.optimizer, "extra": self.extra(),
                   "keep": config.keep,
                   "on_written": (lambda _tmp: self.die("in_save")) if kill else None,
                   "run": run_record(self.run_id, config, self.identity, self.position)}
        if not config.async_save:
            path = save_checkpoint(config.checkpoint, self.position["step"], **options)
            self.log.write("checkpoint", path=path.name, **self.position)
            return
        self.publish()  # one save in flight at most
        self.pending = (async_save_checkpoint(config.checkpoint, self.position["step"],
                                              process_group=self.save_group, **options),
                        dict(self.position))

    def publish(self) -> None:
        """Wait for the pending ``--async-save`` (if any) and publish it."""
        if self.pending is None:
            return
        (pending, position), self.pending = self.pending, None
        waited = time.perf_counter()
        path = pending.wait()
        self.log.write("checkpoint", path=path.name, blocking_s=round(pending.blocking_s, 4),
                       wait_s=round(time.perf_counter() - waited, 4), **position)

    def resume(self, steps_per_epoch: int) -> None:
        """Continue from the newest checkpoint, if any, under ``common.fsdp.resume``'s contract."""
        config = self.config
        path = latest_checkpoint(config.checkpoint) if config.checkpoint else None
        if path is None:
            return
        manifest = read_manifest(path)
        rebuild = check_before_loading(path, manifest, config, self.identity)
        saved = manifest.run["settings"]
        # A per-rank loader state belongs to one world size and one number of workers.
        use_state = (saved_loader_ranks(path) == self.info.world_size
                     and saved["num_workers"] == config.num_workers)
        position, read = manifest.run["position"], {}

        def check(values: dict) -> None:  # between reading the extra values and the tensors
            read["state"] = check_extra(path, values, position=position, info=self.info,
                                        loader=self.loader if use_state else None)

        extra = load_checkpoint(path, model=self.model, optimizer=self.optimizer,
                                extra=self.template(with_loader=use_state),
                                run={"run_id": self.run_id}, check_extra=check)
        self.position = dict(position)
        if rebuild:  # another --num-epochs: the schedule of the new length, at this step
            self.scheduler = rebuild_scheduler(config, self.optimizer,
                                               config.num_epochs * steps_per_epoch,
                                               self.position["step"])
        else:
            self.scheduler.load_state_dict(extra["scheduler"])
        torch.set_rng_state(extra["rng"])
        self.loader_state = read["state"]
        how = ("new epoch" if not self.position["batch_in_epoch"]
               else "loader state" if use_state else "sampler position")
        epochs = [saved["num_epochs"], config.num_epochs] if rebuild else config.num_epochs
        self.log.write("resume", path=path.name, world_size=self.info.world_size, loader=how,
                       num_epochs=epochs, **self.position)
        if rebuild and is_main_process():  # a run extended (or cut) says so
            print(f"note: {length_change(saved['num_epochs'], config.num_epochs, position)}",
                  file=sys.stderr, flush=True)

    def die(self, where: str) -> None:
        self.log.write("simulated_kill", where=where, rank=self.info.world_size - 1, **self.position)
        if self.info.rank == self.info.world_size - 1:
            os.kill(os.getpid(), signal.SIGKILL)  # like the OOM killer: no cleanup at all
