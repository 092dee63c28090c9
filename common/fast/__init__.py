"""Chapter 3: efficient data pipelines (uint8 decoding, batched normalization, the memmap cache).

Modules: ``pipeline`` (decoders, ``Uint8EvalDataset``, ``NormalizedLoader``, ``CacheLoader``),
``cache`` (the uint8 memmap cache) and ``cache_files`` (its files, and the checks before use),
``profiling`` (stage timing, ``DataWaitMeter``), ``memory`` (index memory per worker, PSS of a
pipeline), ``costs`` (the normalization limit, when the cache pays off), ``timing``
(round-robin timing of pipelines, shared with chapter 5's bench) and ``benchmark``
(``python -m common.fast.benchmark``; not imported here: it is an entry point). Imports go
one way: ``common.fast`` uses the core of ``common``, never the reverse.
"""

from __future__ import annotations

from common.lazy import lazy_names

#: Where each name lives: imported on first use (PEP 562), so that a DDP worker that needs the
#: cache does not import torchvision for the decoders and profiling it never uses.
_WHERE = {
    "ArrayIndexDataset": "common.fast.memory",
    "BatchNormalize": "common.fast.pipeline",
    "BatchRandomFlip": "common.fast.pipeline",
    "CacheConfig": "common.fast.cache",
    "CacheError": "common.fast.cache_files",
    "CacheLoader": "common.fast.pipeline",
    "CachedImageDataset": "common.fast.cache",
    "DataWaitMeter": "common.fast.profiling",
    "DraftPilDecoder": "common.fast.pipeline",
    "ImageCache": "common.fast.cache",
    "ListIndexDataset": "common.fast.memory",
    "NormalizedLoader": "common.fast.pipeline",
    "TorchvisionDecoder": "common.fast.pipeline",
    "Uint8EvalDataset": "common.fast.pipeline",
    "ensure_cache": "common.fast.cache",
    "make_decoder": "common.fast.pipeline",
    "make_fast_loader": "common.fast.pipeline",
    "make_index": "common.fast.memory",
    "open_cache": "common.fast.cache",
    "process_memory": "common.fast.memory",
    "time_stages": "common.fast.profiling",
    "verify_cache": "common.fast.cache_files",
    "worker_memory_over_epoch": "common.fast.memory",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
