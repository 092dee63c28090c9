"""``torchrun`` whose failed job ends in one line per cause: it takes torchrun's own arguments.

    python -m common.ddp.torchrun --standalone --nproc-per-node=2 -m common.ddp.train --data DIR

When the ranks of a plain ``torchrun`` job stop on the same bad file, each rank prints its
line, then torchrun's agent prints its log line and a ``ChildFailedError`` traceback. Here the
ranks hand their line to this launcher instead (torchelastic's error file;
``common.cli.LAUNCHER_PRINTS_ERRORS``), and it prints each distinct line once, naming the ranks
that said it::

    ranks 0, 1: error: cannot decode image photos/train/dog/cut.jpg: image file is truncated

with exit status 1, as torchrun's. A rank that only stopped because another one failed is left
out when another rank says why; a rank that crashed with its own traceback (printed by the rank)
gets a line with its exit code or signal. The agent's report of the failure that ends the job
(its "failed (exitcode: ...)" line and the signals it sends the other ranks) is left out; a failure
it restarts the group from (``--max-restarts``) is reported as torchrun reports it, and so is anything
else: a job that succeeds prints what it prints under torchrun. Anything else that stops the agent
(a rendezvous that times out, a bad flag) is torchrun's own message.

``common.ddp.launch.torchrun_command`` builds this command, so every launch of the chapters,
exercises and benchmarks goes through it.

With ``--max-restarts`` above 0 it sets ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` first (the
workaround for a restart bug, ``common.ddp.launch.RESTART_SAFE_ENV``); without restarts the workers
share the agent's store, as under plain torchrun.
Started with ``common.ddp.launch.launch_env`` (which names the starting process, a notebook's kernel),
it ends on Linux when that process ends, however it ends, and torchrun then stops its workers
(``common.ddp.launch.end_with_starter``).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence

from common.cli import LAUNCHER_PRINTS_ERRORS
from common.ddp.launch import end_with_starter, restart_safe_environment

_RANK = re.compile(r"^rank \d+: ")
#: The logger of torchrun's worker processes, which reports a failed worker group.
AGENT_LOGGER = "torch.distributed.elastic.multiprocessing.api"
#: How that logger's report of a failed group begins: the failure, then the signals sent to the others.
_FAILURE_REPORT = ("failed (exitcode", "Sending process", "Closing process")


class FinalFailureLeftOut(logging.Filter):
    """Drops the agent's report of the failure after which it restarts no more (``failure_lines``
    says it instead); the reports of the failures before it, which it restarts from, pass.

    Introduced in docs/scripts.md ("Your own images").
    """

    def __init__(self, max_restarts: int) -> None:
        super().__init__()
        self.restarts_left = max_restarts

    def filter(self, record: logging.LogRecord) -> bool:
        said = str(record.msg)
        if self.restarts_left == 0:
            return not said.startswith(_FAILURE_REPORT)
        if said.startswith(_FAILURE_REPORT[0]):  # a failure the agent restarts the group from
            self.restarts_left -= 1
        return True


def failure_lines(failures: Mapping[int, object]) -> list[str]:
    """One line per distinct cause of ``ChildFailedError.failures`` (global rank -> failure).

    Introduced in docs/scripts.md ("Your own images").
    """
    by_cause: dict[str, list[int]] = {}
    for rank, failure in sorted(failures.items()):
        said = failure.error_file_data.get("message")
        if isinstance(said, str) and said != "<NONE>":  # the rank's own line (common.cli)
            cause = _RANK.sub("", said)
        elif failure.exitcode < 0:
            cause = f"stopped by {failure.message}"
        else:
            cause = f"exited with code {failure.exitcode} (its output above says why)"
        by_cause.setdefault(cause, []).append(rank)
    causes = {cause: ranks for cause, ranks in by_cause.items()
              if not cause.startswith("stopped: another rank")} or by_cause
    return [f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))}: {cause}"
            for cause, ranks in causes.items()]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m common.ddp.torchrun`` (torchrun's arguments).

    Introduced in docs/scripts.md ("Your own images").
    """
    end_with_starter()
    os.environ[LAUNCHER_PRINTS_ERRORS] = "1"  # the ranks inherit it
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    restart_safe_environment(args.max_restarts)  # read by the agent's rendezvous; the ranks inherit it
    agent_log = logging.getLogger(AGENT_LOGGER)
    final_failure = FinalFailureLeftOut(args.max_restarts)
    agent_log.addFilter(final_failure)  # its "failed (exitcode: 2)": the lines below say it
    try:
        run(args)
    except ChildFailedError as error:
        for line in failure_lines(error.failures):
            print(line, file=sys.stderr, flush=True)
        return 1
    finally:
        agent_log.removeFilter(final_failure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
