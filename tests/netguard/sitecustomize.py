"""Network guard for `make test`: any connection off this machine fails loudly.

`make test` puts this folder on PYTHONPATH, so every Python process it starts (pytest,
nbval's kernels, torchrun workers, graded submissions) imports this file at start-up
and installs an audit hook. Loopback, Unix sockets and this machine's own addresses
pass (Jupyter kernels, torchrun rendezvous and gloo need them), and so do the hosts of a
cluster of network namespaces (common/ddp/cluster.py) for the processes started on them: it
lists its hosts as $COMPANION_CLUSTER_HOSTS (``node0=10.213.7.1,node1=10.213.7.2``), names
and private addresses that exist only inside those namespaces. Anything else raises
PermissionError and is appended to $COMPANION_NETGUARD_LOG, which tests/conftest.py turns
into a failed run even if the code under test swallowed the exception.
"""

import ipaddress
import os
import socket
import sys

_LOCAL_NAMES = {None, "", "localhost", "localhost.localdomain", "ip6-localhost"}


def _cluster_hosts() -> tuple[set, set]:
    """The names and private addresses $COMPANION_CLUSTER_HOSTS lists (common/ddp/cluster.py)."""
    names, addresses = set(), set()
    for entry in os.environ.get("COMPANION_CLUSTER_HOSTS", "").split(","):
        name, _, address = entry.strip().partition("=")
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            continue
        if parsed.is_private and not parsed.is_loopback:
            names.add(name)
            addresses.add(str(parsed))
    return names, addresses


_CLUSTER_NAMES, _CLUSTER_ADDRESSES = _cluster_hosts()


def _own_names() -> set:
    try:
        return {socket.gethostname()}
    except OSError:
        return set()


def _is_local_ip(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    if address.is_loopback or address.is_unspecified or str(address) in _CLUSTER_ADDRESSES:
        return True
    try:
        import psutil

        own = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    except ImportError:
        own = set()
    return str(address) in own


def _refuse(what: str) -> None:
    message = f"network access blocked during tests: {what} (pid {os.getpid()})"
    log = os.environ.get("COMPANION_NETGUARD_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(message + "\n")
    raise PermissionError(message)


def _hook(event: str, args: tuple) -> None:
    if event == "socket.connect" or event == "socket.sendto":
        sock, address = args[0], args[1]
        if getattr(sock, "family", None) == getattr(socket, "AF_UNIX", object()):
            return
        if isinstance(address, tuple) and not _is_local_ip(str(address[0])):
            _refuse(f"{event} to {address!r}")
    elif event == "socket.getaddrinfo":
        host = args[0]
        if isinstance(host, bytes):
            host = host.decode()
        if host in _LOCAL_NAMES or host in _own_names() or host in _CLUSTER_NAMES \
                or _is_local_ip(str(host)):
            return
        _refuse(f"name lookup of {host!r}")


sys.addaudithook(_hook)
