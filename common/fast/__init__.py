"""Chapter 3: efficient data pipelines (uint8 decoding, batched normalization, the memmap cache).

Modules: ``pipeline`` (decoders, ``Uint8EvalDataset``, ``NormalizedLoader``, ``CacheLoader``),
``cache`` (the uint8 memmap cache), ``profiling`` (stage timing, ``DataWaitMeter``), ``memory``
(index memory per worker, PSS of a pipeline), ``costs`` (the normalization limit, when the
cache pays off) and ``benchmark`` (``python -m common.fast.benchmark``; not imported here: it is an
entry point). Imports go one way: ``common.fast`` uses the core of ``common``, never the reverse.
"""

from common.fast.cache import (
    CacheConfig,
    CachedImageDataset,
    CacheError,
    ImageCache,
    build_cache,
    ensure_cache,
    open_cache,
    verify_cache,
)
from common.fast.memory import (
    ArrayIndexDataset,
    ListIndexDataset,
    make_index,
    process_memory,
    worker_memory_over_epoch,
)
from common.fast.pipeline import (
    BatchNormalize,
    BatchRandomFlip,
    CacheLoader,
    DraftPilDecoder,
    NormalizedLoader,
    TorchvisionDecoder,
    Uint8EvalDataset,
    make_decoder,
    make_fast_loader,
)
from common.fast.profiling import DataWaitMeter, time_stages

__all__ = [
    "ArrayIndexDataset",
    "BatchNormalize",
    "BatchRandomFlip",
    "CacheConfig",
    "CacheLoader",
    "CacheError",
    "CachedImageDataset",
    "DataWaitMeter",
    "DraftPilDecoder",
    "ImageCache",
    "ListIndexDataset",
    "NormalizedLoader",
    "TorchvisionDecoder",
    "Uint8EvalDataset",
    "build_cache",
    "ensure_cache",
    "make_decoder",
    "make_fast_loader",
    "make_index",
    "open_cache",
    "process_memory",
    "time_stages",
    "verify_cache",
    "worker_memory_over_epoch",
]
