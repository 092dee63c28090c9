"""Storage with a stated read latency, as on a cluster's network storage (NFS, an object store).

On a laptop's SSD a small file is read in microseconds, so a loader's time goes to decoding;
on network storage each read first waits for the server (a millisecond on NFS, tens of
milliseconds from an object store) while the CPU sits idle. ``SlowStorage`` puts such a
wait in front of every read of a dataset, so a notebook can show what workers do for an
I/O-bound loader (they overlap the waits, even on two cores) and what ``prefetch_factor``
does for a store that now and then stalls. The wait is a ``time.sleep``: it costs no CPU,
exactly like waiting on a socket.
"""

from __future__ import annotations

import math
import time
from typing import Any

from torch.utils.data import Dataset


def _seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


class SlowStorage(Dataset):
    """A dataset whose every read first waits ``latency_s``, as on network storage.

    Wraps any map-style dataset; ``storage[i]`` sleeps, then returns ``dataset[i]`` unchanged.
    With ``stall_every=k`` every k-th read (indices ``k-1, 2k-1, ...``) waits ``stall_s``
    more: a busy server's occasional slow reply, deterministic so that every run (and every
    worker) sees the same stalls. Picklable when ``dataset`` is, so DataLoader workers can
    use it under any start method. One read is one sample: the wrapper has no
    ``__getitems__``, so a batched dataset is read sample by sample through it.

    Args:
        dataset: The dataset to read from (anything with ``__getitem__`` and ``__len__``).
        latency_s: Seconds every read waits before it returns.
        stall_s: Extra seconds of a stalled read.
        stall_every: Every how many reads one stalls; 0 means never.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """

    def __init__(self, dataset: Dataset, *, latency_s: float = 0.005, stall_s: float = 0.0,
                 stall_every: int = 0) -> None:
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError(f"SlowStorage needs a map-style dataset (__getitem__ and __len__), "
                            f"got {type(dataset).__name__}")
        if isinstance(stall_every, bool) or not isinstance(stall_every, int) or stall_every < 0:
            raise ValueError(f"stall_every must be an int >= 0 (0: no stalls), got {stall_every!r}")
        self.dataset = dataset
        self.latency_s = _seconds("latency_s", latency_s)
        self.stall_s = _seconds("stall_s", stall_s)
        if self.stall_s > 0 and stall_every == 0:
            raise ValueError(f"stall_s={stall_s} needs stall_every > 0 (which reads stall)")
        self.stall_every = stall_every

    def __len__(self) -> int:
        return len(self.dataset)

    def wait_s(self, idx: int) -> float:
        """Seconds that reading sample ``idx`` waits."""
        stalled = self.stall_every > 0 and idx % self.stall_every == self.stall_every - 1
        return self.latency_s + (self.stall_s if stalled else 0.0)

    def __getitem__(self, idx: int) -> Any:
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} out of range for SlowStorage of {len(self)} samples")
        time.sleep(self.wait_s(idx % len(self)))
        return self.dataset[idx]

    def __repr__(self) -> str:
        stalls = (f", stall_s={self.stall_s}, stall_every={self.stall_every}"
                  if self.stall_every else "")
        return (f"{type(self).__name__}({type(self.dataset).__name__} of {len(self)}, "
                f"latency_s={self.latency_s}{stalls})")
