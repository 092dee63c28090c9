"""Chapter 2.3's datasets that no later chapter reuses: a stream, and a dataset decoded once.

Modules: ``iterable`` (``CsvImageStream``: the annotations CSV read as an ``IterableDataset``,
split across processes and workers by ``shard_of``) and ``preload`` (``PreloadedDataset``: decode
and resize once into one uint8 array, augment every epoch). Chapters 1-2's shared modules are the
core's (``common``); this package uses the core only, and nothing but the chapter imports it.
"""

from __future__ import annotations

from common.lazy import lazy_names

#: Where each name lives, imported on first use (PEP 562), as ``common``'s own names are.
_WHERE = {
    "CsvImageStream": "common.datasets.iterable",
    "PreloadedDataset": "common.datasets.preload",
    "shard_of": "common.datasets.iterable",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
