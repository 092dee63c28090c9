"""Network guard for `make test`: any connection off this machine fails loudly.

`make test` puts this folder on PYTHONPATH, so every Python process it starts (pytest,
nbval's kernels, torchrun workers, graded submissions) imports this file at start-up
and installs an audit hook. Loopback, Unix sockets and this machine's own addresses
pass (Jupyter kernels, torchrun rendezvous and gloo need them); anything else raises
PermissionError and is appended to $COMPANION_NETGUARD_LOG, which tests/conftest.py
turns into a failed run even if the code under test swallowed the exception.
"""

import ipaddress
import os
import socket
import sys

_LOCAL_NAMES = {None, "", "localhost", "localhost.localdomain", "ip6-localhost"}


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
    if address.is_loopback or address.is_unspecified:
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
        if host in _LOCAL_NAMES or host in _own_names() or _is_local_ip(str(host)):
            return
        _refuse(f"name lookup of {host!r}")


sys.addaudithook(_hook)
