"""Generate (or verify) the synthetic shapes dataset used by every chapter.

    python data_scripts/make_synthetic_data.py               # into data/shapes, if missing/damaged
    python data_scripts/make_synthetic_data.py --force       # regenerate anyway
    python data_scripts/make_synthetic_data.py --root /tmp/shapes --num-train 60 --num-val 12

A thin wrapper: the generator and its command line live in the package (``common.tools.make_data``),
so an installed package has them too (``python -m common.tools.make_data``, ``companion-make-data``).
Deterministic: the same options give byte-identical files on the same library versions.
"""

from __future__ import annotations

from common.tools.make_data import MakeDataConfig, main

__all__ = ["MakeDataConfig", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
