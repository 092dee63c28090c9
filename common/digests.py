"""The one sha256 of a file that every record in the repository uses (cache, shards, checkpoints, data).

Introduced in chapters/03_1_efficient_pipelines.ipynb.
"""

from __future__ import annotations

import hashlib
import os

#: Bytes read at a time: a shard or a cache file of several GB never sits in memory whole.
_CHUNK = 1 << 22


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 4 MiB blocks.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()
