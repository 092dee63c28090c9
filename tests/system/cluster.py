"""The cluster fixture: N hosts as network namespaces on a private switch (common/ddp/cluster.py).

A test module's fixture ``make_cluster`` (``yield from builder()``) gives ``make_cluster(size)``,
which builds hosts ``node0``, ``node1``, ... (namespaces ``<prefix>-nodeI``, each with its own
address in 10.213.7.0/24, hostname and /etc/hosts) and removes them after the test, also when it
fails; a killed run's leftovers of the same prefix are removed before building. The
prefix holds the pytest worker's id, so parallel workers build clusters of their own.

Processes started through :func:`start` run on a host, in the repository root; the agents of
:func:`torchrun_argv` are torchrun's own (``python -m torch.distributed.run``'s ``main``) in
``tests.speedups.agent``, which imports the workers' libraries once per host and forks the workers
(``--start-method=fork``): the same agent, rendezvous and restarts, without each worker importing
torch, torchvision and pandas again. They run with the environment the tests' network guard reads
(``COMPANION_CLUSTER_HOSTS``: exactly the cluster's names and addresses). Needs root; elsewhere
the tests skip with one line (``tests.system_parts.require``, a failure under CI=true).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from common.ddp.cluster import Cluster, unavailable
from common.ddp.launch import RESTART_SAFE_ENV, worker_entry
from tests.speedups.agent import forked_workers
from tests.system.forked_ranks import popen, server, server_pids
from tests.system_parts import require

REPO = Path(__file__).resolve().parents[2]
PORT = 29500  # each host has its own ports: any fixed one is free there
#: What a forked preflight's server imports: torch's distributed package, for the store it meets at.
PREFLIGHT_LIBRARIES = ("torch.distributed",)


def cluster_prefix() -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    return f"ct{worker.removeprefix('gw') or 'm'}"


def builder(tag: str = ""):
    """The body of a ``make_cluster`` fixture: skips without root; removes what it built. A
    fixture of a wider scope gives its own ``tag`` (a letter), so that its clusters' prefixes
    differ from those of a test's own fixture (building removes a killed run's namespaces of the
    same prefix)."""
    require("root for network namespaces", unavailable())
    built: list[Cluster] = []

    def build(size: int = 2, **options) -> Cluster:
        cluster = Cluster(size, prefix=cluster_prefix() + tag + chr(ord("a") + len(built)),
                          **options)
        built.append(cluster)
        cluster.start()
        return cluster

    yield build
    for cluster in built:
        cluster.stop()


def environment(**extra: str) -> dict[str, str]:
    """What every process on a host gets beside the cluster's listing: one thread, short
    rendezvous and store timeouts, a store per restart attempt."""
    return {"OMP_NUM_THREADS": "1", **RESTART_SAFE_ENV, **extra}


def torchrun_argv(module: str, args: Sequence[str], *, nnodes: str | int = 2, nproc: int = 1,
                  endpoint: str = f"node0:{PORT}", rdzv_id: str = "job", max_restarts: int = 0,
                  rdzv_conf: str = "join_timeout=60") -> list[str]:
    """One host's agent: torchrun's own, with its workers forked (``forked_workers``)."""
    import sys

    return forked_workers([
        sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={rdzv_id}", f"--rdzv-conf={rdzv_conf}", f"--max-restarts={max_restarts}",
        *worker_entry(module, args)], module, args)


def start(cluster: Cluster, host: int, argv: Sequence[str], **extra_env: str) -> subprocess.Popen:
    """``argv`` on a host, from the repository root, stdout and stderr together."""
    return cluster.popen(host, argv, cwd=REPO, env=environment(**extra_env),
                         stderr=subprocess.STDOUT)


def start_forked(cluster: Cluster, host: int, argv: Sequence[str], *,
                 libraries: Sequence[str] = (), **extra_env: str):
    """``start``'s run of a ``python -m MODULE ARGS`` command, forked from a server on that host
    (``tests.system.forked_ranks.popen``: it runs in the host's namespaces, started as ``start``
    starts a process there, and imported ``libraries`` once: by default torch and what
    torchrun's forking agent preloads): a ``ForkedProcess``, which answers as ``start``'s
    ``Popen`` does. For a cluster that serves several launches (a module's), where the server's
    imports pay off from the second launch on; the server stops with its host."""
    return popen(argv, stderr=subprocess.STDOUT, cwd=str(REPO),
                 env=cluster.environment(environment(**extra_env)), via=cluster.command(host, []),
                 libraries=libraries)


def start_servers(cluster: Cluster, *, libraries: Sequence[str] = ()) -> None:
    """Start the server of every host that ``start_forked`` (without extra variables) forks from,
    side by side: the hosts import at once, and a test's first launches start together."""
    for host in range(len(cluster.hosts)):
        server(cluster.environment(environment()), str(REPO), cluster.command(host, []), libraries)


def served_hosts(tag: str, *, libraries: Sequence[str] = ()) -> Iterator[Cluster]:
    """A module fixture's body: two hosts built under ``tag``, their servers started (importing
    ``libraries`` too), torn down after the module."""
    for build in builder(tag):
        cluster = build(2)
        start_servers(cluster, libraries=libraries)
        yield cluster


def powered_off_after(cluster: Cluster) -> Iterator[Cluster]:
    """A test fixture's body: ``cluster`` for one test, every process it left on a host killed after."""
    yield cluster
    for host in range(len(cluster.hosts)):
        power_off(cluster, host)


def power_off(cluster: Cluster, host: int) -> list[int]:
    """SIGKILL every process on a host at once, as when the machine loses power, except the
    servers ``start_forked`` forks from (test machinery, not part of any job: the agent it
    forked and that agent's workers are killed); the pids killed. Waits until they are gone."""
    keep, killed = server_pids(), []
    deadline = time.monotonic() + 10
    while (alive := [pid for pid in cluster.pids(host) if pid not in keep]) \
            and time.monotonic() < deadline:
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed += [pid for pid in alive if pid not in killed]
        time.sleep(0.05)
    return killed


def finish(processes: Sequence[subprocess.Popen], timeout: float = 240) -> list[str]:
    """Wait for every process; their outputs. A process still running at ``timeout`` is killed
    and the test fails with the outputs so far."""
    outputs = []
    for process in processes:
        try:
            outputs.append(process.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            rest = []
            for other in processes:
                other.kill()
                try:  # a worker the agent leaves behind may hold the pipe: the fixture kills it
                    rest.append(other.communicate(timeout=10)[0] or "")
                except subprocess.TimeoutExpired:
                    rest.append("(output held open by a process left behind)")
            pytest.fail(f"still running after {timeout} s:\n" +
                        "\n----\n".join(text[-2000:] for text in rest))
    return outputs


def preflight(cluster: Cluster, host: int, *args: str, forked: bool = False,
              **extra_env: str) -> subprocess.Popen:
    """``python -m common.ddp.preflight ARGS`` on a host: ``forked``, from a server of the host
    that imported torch's distributed package (what a preflight that meets the other nodes
    imports), for a module's cluster that runs several."""
    import sys

    argv = [sys.executable, "-m", "common.ddp.preflight", *args]
    if forked:
        return start_forked(cluster, host, argv, libraries=PREFLIGHT_LIBRARIES, **extra_env)
    return start(cluster, host, argv, **extra_env)
