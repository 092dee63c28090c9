"""Where the time goes: per-stage timing of the guide's pipeline, and a data-wait meter.

``time_stages`` runs the guide's eval pipeline one stage at a time (read, decode, resize,
crop, to-tensor, normalize, collate, host-to-device) and reports milliseconds per image.
``DataWaitMeter`` wraps any loader in a training loop and measures the *data-wait
fraction*: time spent blocked on the next batch divided by the whole iteration time. Near
0 the model is the bottleneck; near 1 the model waits for data and a faster loader pays off.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
from PIL import Image
from torchvision import transforms

from common.transforms import IMAGENET_MEAN, IMAGENET_STD

STAGES = ("read", "decode", "resize", "crop", "to_tensor", "normalize", "collate",
          "to_device")


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Send what C++ code writes to file descriptor 2 to ``/dev/null`` inside the block.

    ``torch.profiler``'s tracing library (kineto) prints ``profiler_start``/``profiler_stop``
    trace lines, and on a CPU-only machine a GPU-count error line, straight to descriptor 2;
    no setting turns the trace lines off, and in a notebook they appear as stray stderr output.
    Python exceptions are unaffected (they propagate as objects, and descriptor 2 is restored
    before anything prints them).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_batch(paths: Sequence[str | os.PathLike], steps: dict, device: torch.device,
                totals: dict[str, float]) -> None:
    """Run one batch through the stages, adding each stage's seconds to ``totals``."""
    tensors = []
    for path in paths:
        clock = time.perf_counter()
        data = open(path, "rb").read()
        now = time.perf_counter()
        totals["read"] += now - clock
        with Image.open(io.BytesIO(data)) as raw:
            item = raw.convert("RGB")
        clock, now = now, time.perf_counter()
        totals["decode"] += now - clock
        for stage in ("resize", "crop", "to_tensor", "normalize"):
            item = steps[stage](item)
            clock, now = now, time.perf_counter()
            totals[stage] += now - clock
        tensors.append(item)
    clock = time.perf_counter()
    batch = torch.stack(tensors)
    now = time.perf_counter()
    totals["collate"] += now - clock
    batch.to(device)
    _sync(device)
    totals["to_device"] += time.perf_counter() - now


def time_stages(paths: Sequence[str | os.PathLike], *, batch_size: int = 32,
                device: torch.device | str = "cpu", resize_size: int = 256,
                crop_size: int = 224) -> pd.DataFrame:
    """Milliseconds per image of each stage of the guide's eval pipeline, in one process.

    Args:
        paths: Image files (all of them are processed once).
        batch_size: Images per collate / host-to-device copy.
        device: Where the batch is copied in the last stage.
        resize_size: ``Resize`` argument (the guide: 256).
        crop_size: ``CenterCrop`` argument (the guide: 224).

    Returns:
        One row per stage: ``stage``, ``ms_per_image``, ``share`` (of the total).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    device = torch.device(device)
    steps = {"resize": transforms.Resize(resize_size), "crop": transforms.CenterCrop(crop_size),
             "to_tensor": transforms.ToTensor(),
             "normalize": transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)}
    totals = dict.fromkeys(STAGES, 0.0)
    for start in range(0, len(paths), batch_size):
        _time_batch(paths[start:start + batch_size], steps, device, totals)
    frame = pd.DataFrame({"stage": list(STAGES),
                          "ms_per_image": [1e3 * totals[s] / len(paths) for s in STAGES]})
    frame["share"] = frame["ms_per_image"] / frame["ms_per_image"].sum()
    return frame


@dataclass
class DataWaitMeter:
    """Measures how long a loop waits for its loader: ``wait_s / total_s``.

    ``wait`` is the time spent inside ``next()`` on the loader; ``total`` runs from the
    request of the first batch to the moment the loop asks for a batch after the last one.
    The first batch (worker start-up, cold caches) is kept separately in ``first_wait_s``
    and left out of ``fraction`` unless ``include_first=True``.

    Example::

        meter = DataWaitMeter()
        for images, labels in meter.wrap(train_loader):
            ...  # the training step
        print(f"data wait {meter.fraction:.0%}")

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """

    include_first: bool = False
    waits: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)

    def wrap(self, loader: Iterable) -> Iterator:
        """Iterate over ``loader``, timing each wait and each iteration."""
        iterator = iter(loader)
        previous = None  # when the previous batch was requested
        while True:
            start = time.perf_counter()
            if previous is not None:  # an iteration runs from one request to the next
                self.steps.append(start - previous)
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.waits.append(time.perf_counter() - start)
            previous = start
            yield batch

    def _counted(self) -> slice:
        return slice(0 if self.include_first else 1, None)

    @property
    def first_wait_s(self) -> float:
        return self.waits[0] if self.waits else 0.0

    @property
    def wait_s(self) -> float:
        # a loop that stopped early has one more wait than finished iterations
        return sum(self.waits[:len(self.steps)][self._counted()])

    @property
    def total_s(self) -> float:
        return sum(self.steps[self._counted()])

    @property
    def fraction(self) -> float:
        """Data-wait fraction over the counted iterations."""
        if len(self.steps[self._counted()]) == 0:
            raise ValueError("no iterations counted yet (a loader of one batch has nothing "
                             "left once the first batch is set aside)")
        return self.wait_s / self.total_s

    def summary(self) -> dict[str, float]:
        """``batches``, ``wait_s``, ``total_s``, ``fraction``, ``first_wait_s`` as a dict."""
        return {"batches": len(self.waits), "wait_s": self.wait_s, "total_s": self.total_s,
                "fraction": self.fraction, "first_wait_s": self.first_wait_s}
