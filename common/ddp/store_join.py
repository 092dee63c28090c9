"""How long the ranks wait in ``init_process_group`` once all of them have called it, by rendezvous store.

    python -m common.ddp.store_join --rounds 20

Each round launches ``common.ddp.store_join_rank`` (it imports torch and joins a gloo group) under
``python -m common.ddp.torchrun --standalone`` with ``--ranks`` processes of one thread, twice, in
alternating order:

- ``agent``: without ``--max-restarts``. The workers connect to the rendezvous store of torchrun's
  agent, which is up before they start (torchrun's default since PyTorch 2.5).
- ``own``: with ``--max-restarts=1``, for which ``common.ddp.torchrun`` sets
  ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (``common.ddp.launch.RESTART_SAFE_ENV``, the workaround
  for a restart bug). The workers then use a store of their own, which rank 0 serves: a rank that
  calls before rank 0 has opened it finds the port closed and tries again after a pause.

A launch's join is the last return from ``init_process_group`` minus the last call to it (every
rank has arrived by then, so what is left is the store and gloo's connections). The table gives, for
each store, the median and slowest join and how many launches paused longer than ``--pause``
seconds; ``store_join.json`` in ``--out`` holds every join.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from common.cli import option, parse_dataclass_args, positive
from common.ddp.launch import run_command, torchrun_command

#: What each rank runs.
RANK_MODULE = "common.ddp.store_join_rank"
#: The stores compared, and the ``--max-restarts`` that gives each.
STORES = {"agent": 0, "own": 1}


@dataclass
class StoreJoinConfig:
    """The command line of ``python -m common.ddp.store_join``.

    Introduced in docs/scripts.md ("Time to the first step").
    """

    rounds: int = option(20, "rounds (a launch with each store per round)")
    ranks: int = option(2, "processes of each launch")
    pause: float = option(0.1, "a join longer than this many seconds counts as a pause")
    out: Path = option(Path("build/bench/store_join"), "output folder (JSON)")


def join_seconds(stdout: str, ranks: int, command: str = "the launch") -> float:
    """The last rank's return from ``init_process_group`` minus the last rank's call to it, from
    the ``{"event": "joined", ...}`` lines of ``stdout`` (one per rank).

    Raises:
        ValueError: Naming ``command`` when not every one of ``ranks`` ranks printed its line.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    joined = {}
    for line in stdout.splitlines():
        if line.startswith("{") and '"joined"' in line:
            record = json.loads(line)
            joined[record["rank"]] = (record["called"], record["returned"])
    if sorted(joined) != list(range(ranks)):
        raise ValueError(f"{command} printed the joins of ranks {sorted(joined)}, not of all {ranks}")
    return max(returned for _, returned in joined.values()) - max(called for called, _ in joined.values())


def summarize(joins: dict[str, list[float]], pause: float) -> pd.DataFrame:
    """Per store: launches, the median and slowest join in seconds, and the joins over ``pause``.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    return pd.DataFrame({"store": list(joins), "launches": [len(v) for v in joins.values()],
                         "median_s": [statistics.median(v) for v in joins.values()],
                         "max_s": [max(v) for v in joins.values()],
                         "paused": [sum(seconds > pause for seconds in v) for v in joins.values()]})


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.ddp.store_join``.

    Introduced in docs/scripts.md ("Time to the first step").
    """
    config = parse_dataclass_args(
        StoreJoinConfig, argv, description=__doc__.splitlines()[0],
        validate=lambda c: {**positive(c, "rounds", "ranks"),
                            **({"pause": f"must be more than 0, got {c.pause}"} if c.pause <= 0 else {})})
    config.out.mkdir(parents=True, exist_ok=True)
    launches = {store: torchrun_command(RANK_MODULE, nproc_per_node=config.ranks, max_restarts=restarts)
                for store, restarts in STORES.items()}
    joins: dict[str, list[float]] = {store: [] for store in STORES}
    for index in range(config.rounds):
        for store in STORES if index % 2 == 0 else list(STORES)[::-1]:
            done = run_command(launches[store], timeout=300, threads=1)
            joins[store].append(join_seconds(done.stdout, config.ranks, f"the {store!r} launch"))
        print(f"round {index + 1}/{config.rounds}: " + ", ".join(
            f"{store} {values[-1]:.3f} s" for store, values in joins.items()), flush=True)
    (config.out / "store_join.json").write_text(json.dumps({
        "config": {**asdict(config), "out": str(config.out)}, "cores": os.cpu_count(), "joins": joins},
        indent=1))
    print(summarize(joins, config.pause).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"seconds in init_process_group after the last of {config.ranks} ranks called it; 'paused': "
          f"longer than {config.pause} s; agent: torchrun's shared store, own: the workers' own "
          "(--max-restarts=1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
