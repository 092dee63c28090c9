"""What a host sees of the network: its names and interfaces, the route to an address, and what
listens on a port (a c10d store, a silent listener, nothing). ``common.ddp.preflight`` reads these.

Introduced in chapters/04_3_several_machines.ipynb.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct

#: The c10d TCPStore's handshake: a VALIDATE query with its magic number, then GETNUMKEYS, which a
#: store answers with 8 bytes (torch/csrc/distributed/c10d/TCPStoreBackend.hpp).
STORE_VALIDATE = struct.pack("<BI", 0, 0x3C85F7CE)
STORE_GETNUMKEYS = struct.pack("<B", 7)


def resolve(name: str) -> list[str]:
    """IPv4 addresses ``name`` resolves to, in the resolver's order (empty: it does not)."""
    try:
        found = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return list(dict.fromkeys(info[4][0] for info in found))


def interfaces() -> dict[str, list[str]]:
    """This host's interfaces and their IPv4 addresses."""
    import psutil

    return {name: [a.address for a in addrs if a.family == socket.AF_INET]
            for name, addrs in psutil.net_if_addrs().items()}


def interface_of(address: str, table: dict[str, list[str]]) -> str | None:
    """The interface of ``table`` (name to addresses) that holds ``address``, or None."""
    return next((name for name, addresses in table.items() if address in addresses), None)


def route_source(address: str) -> str:
    """The source address this host uses to reach ``address`` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((address, 9))
        return sock.getsockname()[0]


def is_loopback(address: str) -> bool:
    """Whether ``address`` is a loopback address (127.0.0.0/8, ::1)."""
    return ipaddress.ip_address(address).is_loopback


def probe_store(address: str, port: int, timeout: float) -> str:
    """What listens at ``address:port``: ``"store"`` (it answers as a c10d store), ``"silent"``
    (it accepts and says nothing within ``timeout``), ``"other"`` (it answers otherwise or hangs
    up), ``"refused"`` or ``"dropped"`` (no answer to the connection itself)."""
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "dropped"
    except OSError as error:
        return "dropped" if error.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH) else "refused"
    with sock:
        try:
            sock.sendall(STORE_VALIDATE + STORE_GETNUMKEYS)
            reply = b""
            while len(reply) < 8:
                chunk = sock.recv(8 - len(reply))
                if not chunk:
                    return "other"
                reply += chunk
        except TimeoutError:
            return "silent"
        except OSError:
            return "other"
    return "store"


def listener_pid(port: int) -> str:
    """``pid N (name)`` of the process listening on ``port`` here, if this user may see it."""
    import psutil

    try:
        for connection in psutil.net_connections(kind="tcp"):
            if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port \
                    and connection.pid:
                return f"pid {connection.pid} ({psutil.Process(connection.pid).name()})"
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        pass
    return "a process this user cannot see"
