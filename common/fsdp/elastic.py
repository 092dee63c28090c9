"""Elastic runs on one machine: ``torchrun --nnodes=MIN:MAX`` agents that join or leave a run.

Each agent is a ``torchrun`` with a c10d rendezvous at the same endpoint. With ``--nnodes=1:2``
the first agent waits ``last_call_timeout`` seconds for company, then starts its workers at
world size 1. A second agent that arrives later waits in the rendezvous; the running agent
sees it (``num_nodes_waiting() > 0`` in its monitor loop), stops its workers and both start a
new group at world size 2 — which resumes from the newest distributed checkpoint. In torch's
``SimpleElasticAgent._invoke_run`` such a membership change does not count against
``--max-restarts`` ("membership changes do not count as retries"); only failures do.

Every agent's worker sees LOCAL_RANK=0, so ``join_later`` and ``leave_later`` tell the workers
how many ranks their agents start on this host (``COMPANION_RANKS_PER_HOST``): the device plan
(``common.device.plan_device``) then gives each its own GPU, or puts all on the CPU.

The rendezvous admits any agent with the right endpoint and id, whatever flags it passes its
workers. So every worker group starts with ``agree_on_settings``: each rank sends its
settings to all, and a group whose ranks differ (a guest started with ``--seed 5``, or with
``--batch-size 24``, whose collectives would never match the host's) stops at once on every
rank, naming each rank and flag that differs, instead of training a mixture or hanging.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common.cli import flag_name
from common.ddp.launch import RESTART_SAFE_ENV, kill_launch, launch_env, worker_entry
from common.ddp.process_group import gather_objects
from common.device import RANKS_PER_HOST_ENV


def settings_disagreement(members: Sequence[Mapping], *, may_differ: Collection[str]) -> str:
    """Why the ranks ``members`` (``{"settings", "pid", "host"}`` each, in rank order) cannot
    train together (``""``: they agree on everything outside ``may_differ``).

    Introduced in chapters/06_4_elastic_training.ipynb.
    """
    first = members[0]["settings"]
    lines = []
    for rank, member in enumerate(members[1:], start=1):
        mine = member["settings"]
        differ = [f"{flag_name(key)} {first.get(key)!r} / {mine.get(key)!r}"
                  for key in sorted(set(first) | set(mine))
                  if key not in may_differ and first.get(key) != mine.get(key)]
        if differ:
            lines.append(f"rank {rank} (pid {member['pid']} on {member['host']}): "
                         + "; ".join(differ))
    if not lines:
        return ""
    allowed = ", ".join(flag_name(key) for key in sorted(may_differ))
    return (f"the ranks of this job were started with other settings than rank 0 (pid "
            f"{members[0]['pid']} on {members[0]['host']}), rank 0 / other: {' | '.join(lines)}. "
            f"Every agent of an elastic job must pass its workers the same flags (only {allowed} "
            "may differ); this group stops on every rank instead of training a mixture")


def agree_on_settings(settings: Mapping[str, object], *, may_differ: Collection[str]) -> None:
    """Every rank's ``settings`` to every rank; raise on all of them if any rank differs.

    A collective: every rank of the group calls it, first thing after the rendezvous.

    Raises:
        ValueError: Naming each rank, pid, host and flag that differs from rank 0's.

    Introduced in chapters/06_4_elastic_training.ipynb.
    """
    members = gather_objects({"settings": dict(settings), "pid": os.getpid(),
                              "host": socket.gethostname()})
    problem = settings_disagreement(members, may_differ=may_differ)
    if problem:
        raise ValueError(problem)


def elastic_command(module: str, args: Sequence[str] = (), *, endpoint: str, min_nodes: int = 1,
                    max_nodes: int = 2, nproc_per_node: int = 1, rdzv_id: str = "elastic",
                    max_restarts: int = 0, last_call_timeout: float = 1,
                    join_timeout: float = 60, keep_alive_interval: int | None = None,
                    keep_alive_max_attempt: int | None = None,
                    is_host: bool | None = None) -> list[str]:
    """One elastic agent's ``torchrun ... -m module args`` (or ``script.py args``) command line.

    ``last_call_timeout`` (default 30 s in torch) is how long a rendezvous that has
    ``min_nodes`` waits for more; ``join_timeout`` bounds how long an agent waits at all.
    An agent whose heartbeat is ``keep_alive_interval * keep_alive_max_attempt`` seconds old
    (torch's defaults: 5 s and 3) is dead and removed from the rendezvous; only given ones are set.
    ``is_host`` says whether this agent hosts the rendezvous's TCPStore; by default every agent
    on the endpoint's machine tries to, and the first to bind the port wins.

    Introduced in chapters/06_4_elastic_training.ipynb.
    """
    conf = f"last_call_timeout={last_call_timeout},join_timeout={join_timeout}"
    for key, value in (("keep_alive_interval", keep_alive_interval),
                       ("keep_alive_max_attempt", keep_alive_max_attempt),
                       ("is_host", None if is_host is None else int(is_host))):
        if value is not None:
            conf += f",{key}={value}"
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}",
            f"--nnodes={min_nodes}:{max_nodes}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}", f"--rdzv-conf={conf}",
            f"--max-restarts={max_restarts}", *worker_entry(module, args)]


def agents_env(commands: Sequence[Sequence[str]]) -> dict[str, str]:
    """``launch_env()`` plus ``COMPANION_RANKS_PER_HOST`` (the ranks these agents start here) and
    ``RESTART_SAFE_ENV``: these agents are plain torchrun, and each change of membership restarts
    their workers.

    Introduced in chapters/06_4_elastic_training.ipynb.
    """
    flag = "--nproc-per-node="
    ranks = sum(int(next((arg[len(flag):] for arg in command if arg.startswith(flag)), "1"))
                for command in commands)
    return {**launch_env(), **RESTART_SAFE_ENV, RANKS_PER_HOST_ENV: str(ranks)}


def read_log(log_file: str | Path) -> list[dict]:
    """The JSON-lines records of a run's ``--log-file`` so far ([] before it exists).

    Introduced in chapters/06_4_elastic_training.ipynb.
    """
    path = Path(log_file)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@dataclass
class ElasticJoin:
    """What ``join_later`` saw: when the second agent started, both agents' output and exit codes."""

    joined_at: float  # time.time() when the second agent was started
    outputs: list[str] = field(default_factory=list)
    returncodes: list[int] = field(default_factory=list)


def join_later(command: Sequence[str], log_file: str | Path, *, after_step: int,
               timeout: float = 120, guest: Sequence[str] | None = None,
               check: bool = True) -> ElasticJoin:
    """Start one agent; once its run logged a checkpoint of ``after_step``, start a second.

    Both run ``command`` (an ``elastic_command``), or the second ``guest``; returns when
    both have finished.

    Raises:
        RuntimeError: An agent failed (only if ``check``), or the first one ended before
            the second joined.

    Introduced in chapters/06_4_elastic_training.ipynb.
    """
    guest = command if guest is None else guest
    env = agents_env([command, guest])

    def start(argv: Sequence[str]) -> subprocess.Popen:
        return subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)

    first, deadline = start(command), time.monotonic() + timeout
    while not any(r["event"] == "checkpoint" and r["step"] >= after_step
                  for r in read_log(log_file)):
        if first.poll() is not None or time.monotonic() > deadline:
            first.kill()
            raise RuntimeError(f"the first agent ended (or took over {timeout} s) before step "
                               f"{after_step}:\n{first.communicate()[0][-3000:]}")
        time.sleep(0.05)
    joined_at, second = time.time(), start(guest)
    agents = [first, second]
    try:
        result = ElasticJoin(joined_at, [agent.communicate(timeout=timeout)[0] for agent in agents])
    except subprocess.TimeoutExpired as error:
        for agent in agents:
            _kill_tree(agent)
            agent.communicate()
        raise RuntimeError(f"the agents did not finish within {timeout} s of the join: hung, "
                           "killed") from error
    result.returncodes = [agent.returncode for agent in agents]
    for agent, output in zip(agents, result.outputs, strict=True):
        if check and agent.returncode != 0:
            raise RuntimeError(f"an agent exited with {agent.returncode}:\n{output[-3000:]}")
    return result


#: SIGKILL an agent and its workers, which torchrun starts in sessions of their own (chapter 6.4's
#: name for ``common.ddp.launch.kill_launch``).
_kill_tree = kill_launch


@dataclass
class ElasticLeave:
    """What ``leave_later`` saw: when the second agent was killed, and both agents' output."""

    left_at: float  # time.time() when the second agent's process group was killed
    outputs: list[str] = field(default_factory=list)


def _checkpointed_at_world_size(log_file: str | Path, world_size: int, step: int) -> bool:
    """Whether a group of ``world_size`` started and then logged a checkpoint of ``step`` or later."""
    log = read_log(log_file)
    starts = [i for i, r in enumerate(log) if r["event"] == "start" and r["world_size"] == world_size]
    return bool(starts) and any(r["event"] == "checkpoint" and r["step"] >= step
                                for r in log[starts[0]:])


def leave_later(host: Sequence[str], guest: Sequence[str], log_file: str | Path, *,
                after_step: int, timeout: float = 120) -> ElasticLeave:
    """Start two agents together; once step ``after_step`` is checkpointed, kill the guest.

    ``host`` and ``guest`` are ``elastic_command``s with ``is_host=True`` and ``False``: the
    host agent holds the c10d rendezvous's TCPStore, which every agent needs to go on, so it
    is the guest that leaves. The guest agent and its workers (which torchrun starts in
    sessions of their own, so not its process group: its process tree) get SIGKILL, as when
    a machine goes away. Returns when the host agent has finished.

    Raises:
        RuntimeError: The host agent failed, or an agent ended before the guest left.

    Introduced in chapters/06_4_elastic_training.ipynb.
    """
    env = agents_env([host, guest])

    def start(command: Sequence[str], **options) -> subprocess.Popen:
        return subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, **options)

    first, second = start(host), start(guest)
    deadline = time.monotonic() + timeout
    while not _checkpointed_at_world_size(log_file, 2, after_step):
        if first.poll() is not None or second.poll() is not None or time.monotonic() > deadline:
            for agent in (first, second):
                agent.kill()
            raise RuntimeError(f"an agent ended (or {timeout} s passed) before step {after_step} "
                               f"at world size 2:\n{first.communicate()[0][-3000:]}")
        time.sleep(0.05)
    left_at = time.time()
    _kill_tree(second)
    outputs = [first.communicate(timeout=timeout)[0], second.communicate()[0]]
    if first.returncode != 0:
        raise RuntimeError(f"the remaining agent exited with {first.returncode}:\n"
                           f"{outputs[0][-3000:]}")
    return ElasticLeave(left_at, outputs)
