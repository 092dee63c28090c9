"""What a training run reports: JSON lines from rank 0, and its throughput."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from common.ddp.process_group import DistInfo, is_main_process


class RunLog:
    """JSON lines from rank 0, also echoed to stdout; other ranks write nothing.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, path: str, info: DistInfo) -> None:
        self.path, self.info = (Path(path) if path else None), info
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    def write(self, event: str, **values) -> None:
        if not is_main_process():
            return
        record = {"event": event, "attempt": self.attempt, "time": round(time.time(), 3), **values}
        print(json.dumps(record), flush=True)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as handle:
                handle.write(json.dumps(record) + "\n")


@dataclass
class Timing:
    """Throughput bookkeeping: the clock starts after ``warmup`` steps of this process.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    warmup: int = 2
    steps: int = 0
    start: float | None = None
    start_step: int = 0
    wait: float = 0.0

    def step_done(self, step: int) -> None:
        self.steps += 1
        if self.steps == self.warmup:
            self.start, self.start_step, self.wait = time.perf_counter(), step, 0.0

    def summary(self, step: int, batch_size: int) -> dict[str, float]:
        if self.start is None or step == self.start_step:
            return {}
        seconds = time.perf_counter() - self.start
        return {"samples_per_s": round((step - self.start_step) * batch_size / seconds, 2),
                "data_wait_fraction": round(self.wait / seconds, 4),
                "timed_steps": step - self.start_step}


def finish_run(log: RunLog, timing: Timing, *, step: int, first_step: int, world_size: int,
               batch_size: int, **extra) -> None:
    """The last record of every training run: rank 0 logs ``done``.

    ``done`` holds the step reached, the steps of this attempt, the world size, the timing
    summary (samples/s, data-wait fraction) and whatever ``extra`` the trainer adds. The
    trainer saves the final weights first (``common.ddp.trainer.save_final_weights``).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    log.write("done", step=step, steps_this_attempt=step - first_step, world_size=world_size,
              **extra, **timing.summary(step, batch_size))
