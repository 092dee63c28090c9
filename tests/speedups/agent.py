"""``python -m common.ddp.agent ARGS``: torchrun with its workers' libraries imported before it
forks them (``make test``'s launches).

With ``--start-method=fork`` (what ``common.ddp.launch.torchrun_command`` adds under ``make
test``) torchrun's agent forks each worker from its own interpreter, so a worker starts with what
the agent imported. torchrun's agent imports torch only; each worker then imports torchvision
(about 2.4 CPU seconds on this repository's 2-core machine: it loads ``torch._dynamo``) and pandas
(about 1 s) on its own, which is most of what a tiny run costs. This agent imports them once
(``common.ddp.forking.PRELOAD``), then calls torchrun's own ``main`` with the same arguments: the same agent,
rendezvous, restarts and worker variables as ``python -m torch.distributed.run``. Spawned workers
would import everything again whatever the agent holds, so ``torchrun_command`` uses it only to fork.

A forked worker runs its script with ``runpy.run_path``, which does not put the script's folder first
on ``sys.path`` as ``python script.py`` does; this agent puts it there before it forks
(``script_folder_first``), so a script that imports a module beside it runs forked too (chapter 6.1's).

What it preloads, and how ``make test``'s notebooks fork this agent itself, are in the library module
``common.ddp.forking``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from common.ddp.forking import preload_libraries


def script_folder_first(argv: Sequence[str]) -> None:
    """With ``--run-path`` (torchrun's flag: run the script in the forked worker's interpreter), put
    the script's folder first on ``sys.path``, where ``python script.py`` has it. torchrun's own
    parser reads ``argv``, so an argument of the script is never taken for one of torchrun's."""
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(list(argv))
    if args.run_path:
        sys.path.insert(0, os.path.dirname(os.path.abspath(args.training_script)))


def main(argv: Sequence[str] | None = None) -> None:
    """Preload, put a ``--run-path`` script's folder first on ``sys.path``, then run torchrun's agent
    on ``argv`` (default: this command line's arguments)."""
    preload_libraries()
    script_folder_first(sys.argv[1:] if argv is None else argv)
    from torch.distributed.run import main as torchrun

    torchrun(None if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
