"""``python -m common.ddp.store_join_rank``: one rank of ``python -m common.ddp.store_join``.

It imports torch, joins the gloo process group that torchrun describes and prints one JSON line
``{"event": "joined", "rank": R, "called": ..., "returned": ...}``: the ``time.time()`` at which it
called ``init_process_group`` and the one at which that returned. ``store_join`` reads how long
the last rank to arrive waited from those lines.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    """Entry point: join, say when, leave; 0.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv or "RANK" not in os.environ:
        # Imported here only: nothing but torch is imported before the join.
        from common.cli import error_line

        error_line("usage: python -m common.ddp.store_join_rank, what each rank of "
                   "`python -m common.ddp.store_join` runs under torchrun (it takes no arguments)")
        return 2
    import torch.distributed as dist

    called = time.time()
    dist.init_process_group("gloo")
    returned = time.time()
    line = json.dumps({"event": "joined", "rank": dist.get_rank(), "called": called, "returned": returned})
    os.write(sys.stdout.fileno(), f"{line}\n".encode())  # one write: the ranks share the pipe
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
