"""Chapter 5: large datasets as tar shards (the WebDataset convention), streamed per rank and worker.

Modules: ``format`` (writer, manifest, safe streaming reader), ``keys`` (each sample key in one
shard only), ``order`` (an epoch's order as integers: the split by rank and worker, the shuffle buffer, the
resume position), ``dataset`` (``ShardedImageDataset``) and the entry point
``train`` (``python -m common.shards.train``), which is not imported here.
"""

from common.digests import file_sha256
from common.shards.dataset import MAX_BUFFER_BYTES, ShardedImageDataset
from common.shards.format import (
    IMAGE_EXTENSIONS,
    MANIFEST_NAME,
    MAX_MEMBER_BYTES,
    ShardError,
    ShardInfo,
    ShardRecord,
    decode_image,
    ensure_shards,
    read_manifest,
    read_shard,
    verify_shards,
    write_shards,
)
from common.shards.keys import check_unique_keys, shard_keys
from common.shards.order import POLICIES, split_shards, worker_quotas

__all__ = [
    "IMAGE_EXTENSIONS",
    "MAX_BUFFER_BYTES",
    "MANIFEST_NAME",
    "MAX_MEMBER_BYTES",
    "POLICIES",
    "ShardError",
    "ShardInfo",
    "ShardRecord",
    "ShardedImageDataset",
    "check_unique_keys",
    "decode_image",
    "ensure_shards",
    "file_sha256",
    "read_manifest",
    "read_shard",
    "shard_keys",
    "split_shards",
    "verify_shards",
    "worker_quotas",
    "write_shards",
]
