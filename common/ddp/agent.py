"""``python -m common.ddp.agent ARGS``: torchrun with its workers' libraries imported before it
forks them (``make test``'s launches).

With ``--start-method=fork`` (what ``common.ddp.launch.torchrun_command`` adds under ``make
test``) torchrun's agent forks each worker from its own interpreter, so a worker starts with what
the agent imported. torchrun's agent imports torch only; each worker then imports torchvision
(about 2.4 CPU seconds on this repository's 2-core machine: it loads ``torch._dynamo``) and pandas
(about 1 s) on its own, which is most of what a tiny run costs. This agent imports them once
(``PRELOAD``), then calls torchrun's own ``main`` with the same arguments: the same agent,
rendezvous, restarts and worker variables as ``python -m torch.distributed.run``. Spawned workers
would import everything again whatever the agent holds, so ``torchrun_command`` uses it only to fork.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

#: What the workers of this repository's entry points import beyond torch, loaded in the agent.
PRELOAD = ("numpy", "pandas", "PIL.Image", "torchvision.transforms.v2")


def preload() -> None:
    """Import ``PRELOAD`` into this process, so that the processes it forks start with it."""
    for name in PRELOAD:
        importlib.import_module(name)


def main(argv: Sequence[str] | None = None) -> None:
    """Preload, then run torchrun's agent on ``argv`` (default: this command line's arguments)."""
    preload()
    from torch.distributed.run import main as torchrun

    torchrun(None if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
