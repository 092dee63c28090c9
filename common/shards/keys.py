"""Sample keys across a dataset's shards: each key in one shard only, unless oversampling is meant.

Every per-shard check (sha256, counts, members) passes for a repacked copy of a shard (same
keys, other tar bytes, so another sha256) added as one more shard, or for a shard that repeats
a few samples of another: each such sample is then read twice per epoch, by one consumer or by
two ranks. Only the keys tell, and the tar headers hold them: ``check_unique_keys`` reads the
headers of every shard (nothing is decoded, no member data is read) when a
``ShardedImageDataset`` is built. The shard format itself is ``common.shards.format``.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Sequence
from pathlib import PurePosixPath

from common.shards.format import ShardError, ShardInfo


def _key(name: str) -> str:
    # '<folder>/<stem>.<extension>' -> '<folder>/<stem>': the sample key, as the reader has it
    posix = PurePosixPath(name)
    return str(posix.parent / posix.name.partition(".")[0])


def shard_keys(path: str | os.PathLike) -> set[str]:
    """The sample keys of one shard, from its tar headers alone (no member data is read).

    Raises:
        ShardError: Naming the shard, if its headers cannot be read (truncated or corrupt).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    try:
        with tarfile.open(path, mode="r:") as tar:  # seekable: each header read, data skipped
            return {_key(name) for name in tar.getnames()}
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ShardError(f"shard {path}: cannot list its members (truncated or corrupt tar): "
                         f"{error}") from error


def check_unique_keys(shards: Sequence[ShardInfo]) -> None:
    """Refuse a sample key found in two shards: its samples would be read twice per epoch.

    A repacked copy of a shard (same keys, other bytes, so another sha256) or a shard that
    repeats some samples of another passes every per-shard check; only the keys tell. Costs
    one pass over the tar headers (``shard_keys``); nothing is decoded.

    Raises:
        ShardError: Naming the key and both shards. Where oversampling is meant, skip this
            check (``ShardedImageDataset(allow_duplicate_keys=True)``,
            ``common.shards.train --allow-duplicate-keys``).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    owner: dict[str, int] = {}  # key -> index of the first shard that holds it
    for index, shard in enumerate(shards):
        for key in sorted(shard_keys(shard.path)):
            first = owner.setdefault(key, index)
            if first != index:
                raise ShardError(
                    f"sample key {key!r} is in shard {shards[first].path} and again in shard "
                    f"{shard.path} (a copied or repacked shard, or samples repeated across "
                    "shards: each would be read twice per epoch); remove the copy, or allow it "
                    "where oversampling is meant (allow_duplicate_keys=True, "
                    "--allow-duplicate-keys)")
