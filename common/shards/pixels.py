"""The shard trainer's ``--resize`` and ``--normalize``, as the DDP and FSDP trainers have them.

:class:`SquaredFirst` makes every decoded picture square by ``--resize``
(``common.images.pixels.squared``) before the trainer's crop or eval transform, as the folder
paths' loaders do. :func:`shard_statistics` is ``--normalize dataset`` on shards: the training
shards' own per-channel mean and std, computed once through the same eval geometry and kept in
``statistics_<size>[-<resize>].json`` beside their manifest while the shards are the same
(``common.ddp.normalization.stored_statistics``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from common.ddp.normalization import Statistics, stored_statistics
from common.images.pixels import RESIZES, squared
from common.shards.dataset import ShardedImageDataset
from common.shards.format import ShardInfo


class SquaredFirst:
    """``transform(squared(image, resize))``: ``--resize crop|squash|pad`` before a transform
    of a decoded PIL image (a class: DataLoader workers pickle it).

    Introduced in docs/scripts.md ("Your own images").
    """

    def __init__(self, resize: str, transform: Callable) -> None:
        if resize not in RESIZES:
            raise ValueError(f"resize must be one of {RESIZES}, got {resize!r}")
        self.resize, self.transform = resize, transform

    def __call__(self, image):
        return self.transform(squared(image, self.resize))

    def __repr__(self) -> str:
        return f"SquaredFirst(resize={self.resize!r}, {self.transform!r})"


def shards_sha256(shards: Sequence[ShardInfo]) -> str:
    """One sha256 of the shards' names, sample counts and checksums (what statistics belong to).

    Introduced in docs/scripts.md ("Your own images").
    """
    rows = [[shard.path.name, shard.num_samples, shard.sha256] for shard in shards]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def shard_statistics(shards: Sequence[ShardInfo], size: int, resize: str,
                     where: str | Path) -> Statistics:
    """``(mean, std)`` of the training ``shards`` at ``size`` after ``resize``, per channel.

    ``where`` is ``--shards`` (the folder or its manifest): the statistics are kept beside the
    manifest, and computed again when the shards change.

    Introduced in docs/scripts.md ("Your own images").
    """
    from torchvision.transforms import v2  # the eval geometry of V2EvalPreset, kept uint8

    folder = Path(where) if Path(where).is_dir() else Path(where).parent
    suffix = "" if resize == "crop" else f"-{resize}"
    eval_uint8 = SquaredFirst(resize, v2.Compose([v2.PILToTensor(), v2.Resize(size, antialias=True),
                                                  v2.CenterCrop(size)]))

    def images():
        dataset = ShardedImageDataset(list(shards), eval_uint8, shuffle=False, rank=0,
                                      world_size=1, equalize="none", allow_duplicate_keys=True)
        return (image for image, _label in dataset)

    return stored_statistics(folder / f"statistics_{size}{suffix}.json", shards_sha256(shards),
                             images, about={"image_size": size, "resize": resize})
