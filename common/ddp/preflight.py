"""Preflight: run on every node before ``torchrun`` and read what would make the job hang.

    python -m common.ddp.preflight --endpoint node0:29500 --nnodes 2 --serve   # on node0
    python -m common.ddp.preflight --endpoint node0:29500 --nnodes 2           # on every other node

One verdict line per check, ``[ok]``, ``[warn]`` or ``[FAIL]``, then the exit status (0: no
FAIL). The checks, in order, are the classic reasons a job that runs on one machine hangs or fails
on two:

* ``hostname``  this host's name resolves, and not to a loopback address (the 127.0.1.1 trap:
  Debian writes ``127.0.1.1 <hostname>`` into /etc/hosts; gloo and NCCL then tell the other nodes
  to connect to 127.0.1.1, which on those nodes is themselves);
* ``endpoint``  the rendezvous host resolves, and not to loopback when there are several nodes
  (``--rdzv-endpoint=localhost:29500`` on the second node makes it wait for a store of its own);
* ``interface`` the interface that routes to the endpoint, the ``GLOO_SOCKET_IFNAME`` and
  ``NCCL_SOCKET_IFNAME`` to set, and whether the hostname's address or an interface already set
  leaves through another (a second interface that does not route);
* ``port``      the endpoint's port answers (on other nodes) or is free (on the node that serves
  it); a port that drops packets (a firewall), refuses, or accepts and never answers (a silent
  listener: ``torchrun`` hangs on it with no message) is named;
* ``nodes``     with ``--serve`` on the endpoint's node, every node meets at a store on that port and
  they compare their ``--nnodes``, torch, CUDA and NCCL versions and clocks.

Introduced in chapters/04_3_several_machines.ipynb.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from common.ddp.netprobe import (
    interface_of,
    interfaces,
    is_loopback,
    listener_pid,
    probe_store,
    resolve,
    route_source,
)

OK, WARN, FAIL = "ok", "warn", "FAIL"
PREFIX = "preflight/"


@dataclass(frozen=True)
class Check:
    """One verdict: the check's name, ok/warn/FAIL, and one line saying what was found."""

    name: str
    status: str
    message: str

    def line(self) -> str:
        return f"[{self.status}]".ljust(7) + f"{self.name:<10} {self.message}"


# -- command line ------------------------------------------------------------------------------

def parse_endpoint(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (e.g. node0:29500)")
    return host.strip("[]"), int(port)


def parse_nnodes(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    try:
        bounds = (int(low), int(high if sep else low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not N or MIN:MAX (e.g. 2 or 1:2)") from None
    if not 1 <= bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= MIN <= MAX")
    return bounds


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 < seconds <= 3600")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m common.ddp.preflight",
        description="Check this node before torchrun --nnodes=N --rdzv-endpoint=HOST:PORT: one "
                    "line per check, exit status 1 if any FAILs.")
    parser.add_argument("--endpoint", required=True, type=parse_endpoint,
                        help="the rendezvous endpoint HOST:PORT, as given to torchrun")
    parser.add_argument("--nnodes", required=True, type=parse_nnodes,
                        help="the number of nodes, N or MIN:MAX, as given to torchrun")
    parser.add_argument("--serve", action="store_true",
                        help="this node hosts the endpoint: hold a store on its port until every "
                             "node has compared versions and clocks (run it on the first node)")
    parser.add_argument("--timeout", type=positive_seconds, default=10.0,
                        help="seconds to wait for the endpoint and for the other nodes (10)")
    return parser


# -- the checks --------------------------------------------------------------------------------

def check_hostname(hostname: str, addresses: list[str], table: dict[str, list[str]]) -> Check:
    if not addresses:
        return Check("hostname", FAIL, f"{hostname} does not resolve: list it in /etc/hosts with "
                                       "this host's address (the other nodes need it too)")
    loop = [a for a in addresses if is_loopback(a)]
    if loop:
        return Check("hostname", FAIL,
                     f"{hostname} resolves to {loop[0]}, a loopback address (the 127.0.1.1 trap of "
                     "Debian's /etc/hosts): gloo and NCCL would tell the other nodes to connect "
                     f"to {loop[0]}, which is each of them itself. Fix: in /etc/hosts, give "
                     f"{hostname} this host's real address, or set GLOO_SOCKET_IFNAME/"
                     "NCCL_SOCKET_IFNAME (see interface)")
    where = interface_of(addresses[0], table)
    if where is None:
        return Check("hostname", FAIL, f"{hostname} resolves to {addresses[0]}, which no interface "
                                       "of this host has: fix its line in /etc/hosts")
    return Check("hostname", OK, f"{hostname} resolves to {addresses[0]} ({where})")


def check_endpoint(host: str, port: int, addresses: list[str], nnodes: tuple[int, int]) -> Check:
    if not addresses:
        return Check("endpoint", FAIL, f"{host} does not resolve on this node: add it to "
                                       "/etc/hosts or give its address")
    if is_loopback(addresses[0]) and nnodes[1] > 1:
        return Check("endpoint", FAIL,
                     f"{host}:{port} resolves to {addresses[0]}, this node's own loopback: with "
                     f"--nnodes {_nnodes_text(nnodes)} every node must name the first node "
                     "(its hostname or address, the same on every node); with localhost each node "
                     "waits for a store of its own until the rendezvous times out")
    return Check("endpoint", OK, f"{host}:{port} resolves to {addresses[0]}")


def check_interface(endpoint_address: str, hostname_addresses: list[str],
                    table: dict[str, list[str]], environ: dict[str, str],
                    source: Callable[[str], str] = route_source) -> Check:
    try:
        via = source(endpoint_address)
    except OSError as error:
        return Check("interface", FAIL, f"no route from this host to {endpoint_address} "
                                        f"({error.strerror or error})")
    name = interface_of(via, table) or "?"
    if is_loopback(via):
        return Check("interface", OK, f"{endpoint_address} is this host ({name})")
    fix = f"export GLOO_SOCKET_IFNAME={name} NCCL_SOCKET_IFNAME={name}"
    for variable in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        chosen = environ.get(variable)
        if chosen and chosen.split(",")[0] != name:
            return Check("interface", FAIL,
                         f"{variable}={chosen}, but the route to {endpoint_address} leaves through "
                         f"{name} ({via}): the other nodes cannot reach {chosen}'s address. Fix: "
                         f"{fix}")
    own = [a for a in hostname_addresses if not is_loopback(a)]
    if own and interface_of(own[0], table) not in (name, None) and \
            not environ.get("GLOO_SOCKET_IFNAME"):
        return Check("interface", FAIL,
                     f"the hostname resolves to {own[0]} on {interface_of(own[0], table)}, but the "
                     f"route to {endpoint_address} leaves through {name} ({via}); gloo would "
                     f"listen on the wrong one. Fix: {fix}")
    return Check("interface", OK, f"{endpoint_address} is reached through {name} ({via}); "
                                  f"to be sure: {fix}")


def check_port_here(port: int, timeout: float) -> Check:
    """On the node that serves the endpoint: the port must be free for the store."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore binds
        try:
            sock.bind(("", port))
            return Check("port", OK, f"{port} is free on this host (the store will listen here)")
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                return Check("port", FAIL, f"cannot listen on {port}: {error.strerror}")
    held = listener_pid(port)
    kind = probe_store("127.0.0.1", port, timeout=min(timeout, 3.0))
    if kind == "silent":
        return Check("port", FAIL, f"{port} is held by a silent listener, {held}: it accepts "
                                   "connections and never answers, so torchrun would hang with no "
                                   "message. Stop it or choose another port")
    what = "a c10d store (another job's rendezvous?)" if kind == "store" else held
    return Check("port", FAIL, f"{port} is already in use here by {what}: choose another port")


def check_port_remote(host: str, address: str, port: int, timeout: float) -> Check:
    """On any other node: the port must answer, as a store, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        kind = probe_store(address, port, timeout=max(0.5, min(3.0, deadline - time.monotonic())))
        if kind != "refused" or time.monotonic() >= deadline:
            break
        time.sleep(0.2)  # the first node may not be up yet
    target = f"{host}:{port}"
    if kind == "store":
        return Check("port", OK, f"{target} answers as a c10d store")
    if kind == "refused":
        return Check("port", FAIL, f"{target} refused the connection for {timeout:g} s: nothing "
                                   f"listens there (start the first node first, or the port differs)")
    if kind == "dropped":
        return Check("port", FAIL, f"{target} did not answer within {timeout:g} s: packets to it are "
                                   f"dropped, as a firewall does. Fix: open TCP port {port} on "
                                   f"{host} (nft list ruleset / iptables -L)")
    if kind == "silent":
        return Check("port", FAIL, f"{target} accepts connections and never answers (a silent "
                                   "listener): torchrun would hang there with no message. Stop "
                                   f"what holds the port on {host} (ss -ltnp 'sport = :{port}') or "
                                   "choose another port")
    return Check("port", FAIL, f"{target} answers, but not as a c10d store: another service holds "
                               "it; choose another port")


# -- meeting the other nodes -------------------------------------------------------------------

def node_facts(nnodes: tuple[int, int]) -> dict:
    import torch

    nccl = None
    try:
        if torch.cuda.is_available():
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError):
        nccl = None
    return {"host": socket.gethostname(), "nnodes": _nnodes_text(nnodes), "torch": torch.__version__,
            "cuda": torch.version.cuda, "nccl": nccl, "python": platform.python_version()}


def compare_nodes(facts: list[dict], clocks: list[float], expected: tuple[int, int],
                  timeout: float) -> list[Check]:
    """The checks of what the nodes posted: how many came, ``--nnodes``, versions, clocks."""
    names = ", ".join(f"{f['host']} (--nnodes {f['nnodes']})" for f in facts)
    checks = []
    if len(facts) < expected[0]:
        checks.append(Check("nodes", FAIL, f"{len(facts)} of {_nnodes_text(expected)} nodes met "
                                           f"within {timeout:g} s: {names}"))
    else:
        checks.append(Check("nodes", OK, f"{len(facts)} nodes met: {names}"))
    counts = {f["nnodes"] for f in facts}
    if len(counts) > 1:
        checks.append(Check("nnodes", FAIL, f"the nodes disagree on --nnodes: {names}; give every "
                                            "node the same value"))
    else:
        checks.append(Check("nnodes", OK, f"every node says --nnodes {counts.pop()}"))
    for key in ("torch", "cuda", "nccl", "python"):
        values = {f["host"]: f[key] for f in facts}
        if len(set(values.values())) > 1:
            listed = ", ".join(f"{host} {value}" for host, value in values.items())
            checks.append(Check(key, FAIL, f"versions differ: {listed}; install the same on "
                                           "every node"))
        else:
            checks.append(Check(key, OK, f"{next(iter(values.values()))} on every node"))
    spread = max(clocks) - min(clocks) if clocks else 0.0
    checks.append(Check("clock", WARN if spread > 1.0 else OK,
                        f"the clocks agree within {spread:.2f} s" if spread <= 1.0 else
                        f"the clocks differ by {spread:.1f} s: logs of different nodes will not "
                        "line up (run NTP/chrony on every node)"))
    return checks


def meet(host: str, port: int, serve: bool, nnodes: tuple[int, int], timeout: float) -> list[Check]:
    """Meet the other nodes at a store on the endpoint (served here with ``serve``), post this
    node's facts, and compare everyone's."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    try:
        return _meet(TCPStore, timedelta, host, port, serve, nnodes, timeout)
    except (RuntimeError, OSError) as error:  # torch's DistError is a RuntimeError
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return [Check("nodes", FAIL, f"the store at {host}:{port} failed: {first}")]


def _meet(TCPStore, timedelta, host, port, serve, nnodes, timeout) -> list[Check]:
    store = TCPStore("127.0.0.1" if serve else host, port, is_master=serve,
                     wait_for_workers=False, timeout=timedelta(seconds=timeout))
    mine = store.add(PREFIX + "count", 1)
    store.set(f"{PREFIX}node/{mine}", json.dumps(node_facts(nnodes)))
    deadline = time.monotonic() + timeout
    while store.add(PREFIX + "count", 0) < nnodes[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    count = store.add(PREFIX + "count", 0)
    store.set(f"{PREFIX}clock/{mine}", repr(time.time()))
    clocks_deadline = time.monotonic() + 2.0
    while time.monotonic() < clocks_deadline and \
            not store.check([f"{PREFIX}clock/{i}" for i in range(1, count + 1)]):
        time.sleep(0.02)
    facts = [json.loads(store.get(f"{PREFIX}node/{i}")) for i in range(1, count + 1)]
    clocks = [float(store.get(f"{PREFIX}clock/{i}")) for i in range(1, count + 1)
              if store.check([f"{PREFIX}clock/{i}"])]
    store.add(PREFIX + "read", 1)
    if serve:  # keep the store up until every node that came has read
        while store.add(PREFIX + "read", 0) < store.add(PREFIX + "count", 0) and \
                time.monotonic() < deadline + 5:
            time.sleep(0.05)
    return compare_nodes(facts, clocks, nnodes, timeout)


# -- the command ----------------------------------------------------------------------------

def run_checks(host: str, port: int, nnodes: tuple[int, int], serve: bool, timeout: float,
               environ: dict[str, str] | None = None) -> list[Check]:
    environ = dict(os.environ if environ is None else environ)
    table = interfaces()
    hostname = socket.gethostname()
    hostname_addresses = resolve(hostname)
    checks = [check_hostname(hostname, hostname_addresses, table)]
    endpoint_addresses = resolve(host)
    checks.append(check_endpoint(host, port, endpoint_addresses, nnodes))
    if not endpoint_addresses or checks[-1].status == FAIL:
        return checks
    address = endpoint_addresses[0]
    checks.append(check_interface(address, hostname_addresses, table, environ))
    if checks[-1].status == FAIL and checks[-1].message.startswith("no route"):
        return checks
    here = serve or any(address in addresses for addresses in table.values())
    checks.append(check_port_here(port, timeout) if here else
                  check_port_remote(host, address, port, timeout))
    if checks[-1].status == FAIL:
        return checks
    if serve or not here:
        checks += meet(host, port, serve, nnodes, timeout)
    return checks


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    host, port = args.endpoint
    print(f"preflight on {socket.gethostname()}: endpoint {host}:{port}, "
          f"--nnodes {_nnodes_text(args.nnodes)}{', serving the store' if args.serve else ''}",
          flush=True)
    checks = run_checks(host, port, args.nnodes, args.serve, args.timeout)
    for check in checks:
        print(check.line(), flush=True)
    failed = [check.name for check in checks if check.status == FAIL]
    print(f"verdict: {'FAIL (' + ', '.join(failed) + ')' if failed else 'ready for torchrun'}",
          flush=True)
    return 1 if failed else 0


def _nnodes_text(nnodes: Iterable[int]) -> str:
    low, high = nnodes
    return str(low) if low == high else f"{low}:{high}"


if __name__ == "__main__":
    sys.exit(main())
