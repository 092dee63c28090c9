"""Chapter 5: large datasets as tar shards (the WebDataset convention), streamed per rank and worker.

Modules: ``format`` (writer, manifest, safe streaming reader), ``keys`` (each sample key in one
shard only), ``order`` (an epoch's order as integers: the split by rank and worker, the shuffle buffer, the
resume position), ``dataset`` (``ShardedImageDataset``) and the entry point
``train`` (``python -m common.shards.train``), which is not imported here.
"""

from common.digests import file_sha256 as file_sha256  # hashlib only: re-exported
from common.lazy import lazy_names

#: Where each name lives: imported on first use (PEP 562), so that ``python -m common.shards.make``
#: (``make_shards.py``) does not import the reader's torchvision and torch.utils.data first.
_WHERE = {
    "IMAGE_EXTENSIONS": "common.shards.format",
    "MANIFEST_NAME": "common.shards.format",
    "MAX_BUFFER_BYTES": "common.shards.dataset",
    "MAX_MEMBER_BYTES": "common.shards.format",
    "POLICIES": "common.shards.order",
    "ShardError": "common.shards.format",
    "ShardInfo": "common.shards.format",
    "ShardRecord": "common.shards.format",
    "ShardedImageDataset": "common.shards.dataset",
    "check_unique_keys": "common.shards.keys",
    "decode_image": "common.shards.format",
    "ensure_shards": "common.shards.format",
    "read_manifest": "common.shards.format",
    "read_shard": "common.shards.format",
    "shard_keys": "common.shards.keys",
    "split_shards": "common.shards.order",
    "verify_shards": "common.shards.format",
    "worker_quotas": "common.shards.order",
    "write_shards": "common.shards.format",
}

__all__ = sorted([*_WHERE, "file_sha256"])
__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
