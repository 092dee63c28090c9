"""Convert a CSV + images dataset into tar shards (WebDataset convention) with a manifest.

    python data_scripts/make_shards.py                        # data/shapes -> data/shards/{train,val}
    python data_scripts/make_shards.py --shard-size 50        # smaller shards
    python data_scripts/make_shards.py --csv data/shapes/train/labels.csv \\
        --images data/shapes/train/images --out /tmp/shards/train --shard-size 100
    python data_scripts/make_shards.py --imagefolder DIR --out /tmp/shards   # your own images

A thin wrapper: the converter and its command line live in the package (``common.shards.make``),
so an installed package has them too (``python -m common.shards.make``, ``companion-make-shards``).
Each sample becomes ``<key>.jpg`` (the original bytes) + ``<key>.cls`` (the label); keys
``00000000, 00000001, ...`` in CSV order; ``manifest.json`` lists every shard with its sample
count, size and sha256. Deterministic: the same input gives byte-identical output.
``--imagefolder DIR`` takes an ImageFolder root (``DIR/train/<class>/``, ``DIR/val/<class>/``:
both splits, into ``<out>/train`` and ``<out>/val``) or one split, and lists the class names in
the manifest.
"""

from __future__ import annotations

from common.shards.make import (
    MakeShardsConfig,
    convert,
    convert_imagefolder,
    main,
    parse_args,
)

__all__ = ["MakeShardsConfig", "convert", "convert_imagefolder", "main", "parse_args"]

if __name__ == "__main__":
    raise SystemExit(main())
