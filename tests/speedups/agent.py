"""``python -m tests.speedups.agent ARGS``: torchrun with its workers' libraries imported before it
forks them, for system tests that launch many short jobs.

With ``--start-method=fork`` torchrun's agent forks each worker from its own interpreter, so a
worker starts with what the agent imported. torchrun's agent imports torch only; each worker then
imports torchvision (about 2.4 CPU seconds on a 2-core machine: it loads ``torch._dynamo``) and
pandas (about 1 s) on its own, which is most of what a tiny run costs. This agent imports them once
(``PRELOAD``), then runs the launcher ``common.ddp.launch.torchrun_command`` names (``common.ddp.torchrun``,
torchrun whose failed job ends in one line per cause) with the same arguments: the same agent,
rendezvous, restarts, worker variables and output as the learner's launch.

A forked worker runs its script with ``runpy.run_path``, which does not put the script's folder first
on ``sys.path`` as ``python script.py`` does; this agent puts it there before it forks
(``script_folder_first``), so a script that imports a module beside it runs forked too.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from common.ddp.launch import LAUNCHER, torchrun_command, worker_entry

#: What the workers of this repository's entry points import beyond torch, loaded in the agent.
PRELOAD = ("numpy", "pandas", "PIL.Image", "torchvision.transforms.v2")
#: This module, as ``python -m`` runs it.
AGENT = "tests.speedups.agent"


def preload_libraries() -> None:
    """Import ``PRELOAD`` into this process, so that the processes it forks start with it."""
    for name in PRELOAD:
        importlib.import_module(name)


def module_file(module: str) -> str:
    """The absolute path of ``module``'s source file (what ``torchrun --run-path`` runs).

    Raises:
        ValueError: The module cannot be found, or has no source file.
    """
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ValueError(f"{module} is not a module with a source file that torchrun --run-path can run")
    return str(Path(spec.origin).resolve())


def forking_command(target: str, args: Sequence[str] = (), **options) -> list[str]:
    """``common.ddp.launch.torchrun_command(target, args, **options)`` with this agent and forked
    workers: torchrun's own ``--start-method=fork --run-path FILE`` in place of ``-m target``."""
    return forked_workers(torchrun_command(target, args, **options), target, args)


def forked_workers(command: Sequence[str], target: str, args: Sequence[str] = ()) -> list[str]:
    """Any torchrun command line of ``target`` (``python -m common.ddp.torchrun OPTIONS`` as
    ``torchrun_command`` builds it, or ``python -m torch.distributed.run OPTIONS``; ``-m target
    args`` or ``script.py args`` at its end: ``worker_entry``), this agent's with forked workers:
    the same OPTIONS, then ``--start-method=fork --run-path FILE args``.

    Raises:
        ValueError: ``command`` is not torchrun's, or does not end with ``target`` and ``args``.
    """
    command, tail = [str(part) for part in command], worker_entry(target, args)
    launchers = (["-m", LAUNCHER], ["-m", "torch.distributed.run"])
    if command[1:3] not in launchers or command[len(command) - len(tail):] != tail:
        raise ValueError(f"not a torchrun command line of {target}: {command}")
    script = str(target).endswith(".py")
    path = str(Path(target).resolve()) if script else module_file(target)
    return [command[0], "-m", AGENT, *command[3:len(command) - len(tail)],
            "--start-method=fork", "--run-path", path, *args]


def script_folder_first(argv: Sequence[str]) -> None:
    """With ``--run-path`` (torchrun's flag: run the script in the forked worker's interpreter), put
    the script's folder first on ``sys.path``, where ``python script.py`` has it. torchrun's own
    parser reads ``argv``, so an argument of the script is never taken for one of torchrun's."""
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(list(argv))
    if args.run_path:
        sys.path.insert(0, os.path.dirname(os.path.abspath(args.training_script)))


def main(argv: Sequence[str] | None = None) -> int:
    """Preload, put a ``--run-path`` script's folder first on ``sys.path``, then run the learner's
    launcher (``common.ddp.torchrun``) on ``argv`` (default: this command line's arguments); its
    exit status."""
    preload_libraries()
    argv = list(sys.argv[1:] if argv is None else argv)
    script_folder_first(argv)
    from common.ddp import torchrun

    return torchrun.main(argv)


if __name__ == "__main__":
    sys.exit(main())
