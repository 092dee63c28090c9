"""``python -m common.ddp.first_step_rank MODULE ARGS``: one rank of ``first_step --libraries-first``.

Each rank imports the libraries both launches of ``python -m common.ddp.first_step`` share
(``LIBRARIES``: torch, its distributed package and DDP, ``torch._dynamo``, torchvision's models,
datasets and transforms, Pillow) before anything else, then imports ``MODULE`` (``common.ddp.train``
or ``common.ddp.examples_main``) and calls its ``main(ARGS)``. Rank 0 first prints one JSON line
``{"event": "libraries", "libraries_cpu_s": ..., "imports_cpu_s": ...}``: its CPU seconds for the
libraries, then for ``MODULE``'s own imports beyond them. The launch's ``first_step`` record then
says how much CPU the work from there to the end of the first step took, apart from the imports
that vary most between launches.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import time

#: What both trainers of ``first_step`` import, in this order (torchvision imports ``torch._dynamo``,
#: and DDP's constructor does too).
LIBRARIES = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo", "torchvision",
             "torchvision.models", "torchvision.datasets", "torchvision.transforms", "PIL.Image")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package, an empty or relative name
        return False


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``LIBRARIES``, then ``MODULE``, then ``MODULE.main(ARGS)``; its exit code.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-") or not _importable(argv[0]):
        # Imported here only: nothing of common is imported before the timing.
        from common.cli import error_line

        error_line("usage: python -m common.ddp.first_step_rank MODULE [ARGS...], what each rank of "
                   "`python -m common.ddp.first_step --libraries-first` runs: MODULE must be an "
                   f"importable module with a main(argv), got {argv[0] if argv else 'nothing'!r}")
        return 2
    start = time.process_time()
    for name in LIBRARIES:
        importlib.import_module(name)
    libraries = time.process_time()
    module = importlib.import_module(argv[0])
    imports = time.process_time()
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps({"event": "libraries", "libraries_cpu_s": round(libraries - start, 3),
                          "imports_cpu_s": round(imports - libraries, 3)}), flush=True)
    return module.main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
