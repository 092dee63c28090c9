"""Several machines on one Linux box: hosts made of network namespaces on a private switch.

Each host is a network namespace with its own network stack: one interface ``eth0`` with its own
address, a cable (a veth pair) to a switch (a Linux bridge in a namespace of its own), its own
hostname and its own ``/etc/hosts`` (``ip netns exec`` shows ``/etc/netns/<namespace>/hosts`` as
``/etc/hosts``). Processes started with :meth:`Cluster.command` run "on" that host: they see only
its interfaces, so ``localhost`` there is that host, and reaching another host goes over the cable.

The links can be slowed to a stated bandwidth (``tc qdisc ... tbf``), cut (:meth:`Cluster.link`),
firewalled (``nft``), or given a second interface that leads nowhere: the failures of real
clusters, made on one machine. Making namespaces needs root (``CAP_SYS_ADMIN`` and ``CAP_NET_ADMIN``):
:func:`unavailable` says why a machine cannot.

The addresses are private (``10.213.7.0/24`` by default) and exist only inside these namespaces;
nothing here touches the machine's own interfaces, routes or ``/etc/hosts``.

Introduced in chapters/04_3_several_machines.ipynb.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.ddp.launch import STARTER_ENV

SUBNET = "10.213.7.0/24"
#: A second subnet for an interface that routes nowhere (:meth:`Cluster.add_dead_interface`).
DEAD_SUBNET = "10.213.8.0/24"
NETNS_ETC = Path("/etc/netns")
#: What a process started on a host finds in its environment: ``name=address`` of every host.
HOSTS_ENV = "COMPANION_CLUSTER_HOSTS"
TOOLS = ("ip", "unshare")


def unavailable() -> str | None:
    """None when this process can build a cluster; otherwise one sentence saying why not."""
    missing = [tool for tool in TOOLS if _which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found (Debian/Ubuntu: apt-get install iproute2 util-linux)"
    if os.geteuid() != 0:
        return f"making network namespaces needs root (this process runs as uid {os.geteuid()})"
    return None


def _which(tool: str) -> str | None:
    return shutil.which(tool, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def _run(*argv: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([_which(argv[0]) or argv[0], *argv[1:]], capture_output=True, text=True,
                          input=input, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done


@dataclass(frozen=True)
class Host:
    """One machine of the cluster: its hostname, network namespace and address on ``eth0``."""

    name: str
    namespace: str
    address: str
    interface: str = "eth0"


class Cluster:
    """``size`` hosts ``node0``, ``node1``, ... on one switch; a context manager.

    ``prefix`` names the namespaces (``<prefix>-node0``, ``<prefix>-switch``): a cluster started
    again with the same prefix first removes what a killed run left behind.
    ``loopback_hostname`` lists each host's own name as ``127.0.1.1`` in its hosts file, as
    Debian's installer writes it (the trap chapter 4.3 shows).
    """

    def __init__(self, size: int = 2, *, prefix: str = "c43", subnet: str = SUBNET,
                 loopback_hostname: bool = False) -> None:
        if not 1 <= size <= 200:
            raise ValueError(f"size={size}: a cluster has 1 to 200 hosts")
        network = ipaddress.ip_network(subnet)
        if not network.is_private:
            raise ValueError(f"subnet {subnet} is not private: use one of 10/8, 172.16/12, 192.168/16")
        self.prefix, self.network = prefix, network
        addresses = list(network.hosts())
        self.hosts = [Host(f"node{i}", f"{prefix}-node{i}", str(addresses[i])) for i in range(size)]
        self.switch = f"{prefix}-switch"
        self.loopback_hostname = loopback_hostname
        self.started = False

    # -- building and removing -------------------------------------------------------------

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def namespaces(self) -> list[str]:
        """Every namespace of this prefix that exists now (this cluster's or a killed run's)."""
        listed = _run("ip", "netns", "list").stdout.split("\n")
        names = [line.split()[0] for line in listed if line.strip()]
        return [name for name in names if name.startswith(self.prefix + "-")]

    def start(self) -> None:
        """Build the switch and the hosts (removing a killed run's leftovers first)."""
        reason = unavailable()
        if reason:
            raise RuntimeError(f"cannot build a cluster: {reason}")
        self.stop()
        self.started = True
        try:
            _run("ip", "netns", "add", self.switch)
            self._in(self.switch, "ip", "link", "add", "br0", "type", "bridge")
            self._in(self.switch, "ip", "link", "set", "br0", "up")
            for index, host in enumerate(self.hosts):
                self._add_host(index, host)
        except BaseException:
            self.stop()
            raise

    def _add_host(self, index: int, host: Host) -> None:
        _run("ip", "netns", "add", host.namespace)
        self.write_hosts_file(host)
        port = f"{self.prefix[:6]}p{index}"  # the switch's end of the cable (15 characters at most)
        _run("ip", "link", "add", port, "netns", self.switch, "type", "veth",
             "peer", "name", host.interface, "netns", host.namespace)
        self._in(self.switch, "ip", "link", "set", port, "master", "br0", "up")
        self._in(host.namespace, "ip", "addr", "add", f"{host.address}/{self.network.prefixlen}",
                 "dev", host.interface)
        self._in(host.namespace, "ip", "link", "set", host.interface, "up")
        self._in(host.namespace, "ip", "link", "set", "lo", "up")

    def hosts_file(self, host: Host) -> str:
        """The ``/etc/hosts`` a host sees: localhost, then every host's name and address."""
        lines = ["127.0.0.1\tlocalhost"]
        if self.loopback_hostname:
            lines.append(f"127.0.1.1\t{host.name}")
        lines += [f"{other.address}\t{other.name}" for other in self.hosts
                  if not (self.loopback_hostname and other is host)]
        return "\n".join(lines) + "\n"

    def write_hosts_file(self, host: Host, text: str | None = None) -> Path:
        """Write the host's ``/etc/hosts`` (``text``, or :meth:`hosts_file`'s). Its name lookups
        read only that file (its own ``nsswitch.conf``): no host asks a DNS server."""
        folder = NETNS_ETC / host.namespace
        folder.mkdir(parents=True, exist_ok=True)
        system = Path("/etc/nsswitch.conf")
        lines = system.read_text().splitlines() if system.is_file() else []
        lines = [line for line in lines if not line.startswith("hosts:")] + ["hosts: files"]
        (folder / "nsswitch.conf").write_text("\n".join(lines) + "\n")
        path = folder / "hosts"
        path.write_text(self.hosts_file(host) if text is None else text)
        return path

    def stop(self) -> None:
        """Kill every process on the hosts, remove the namespaces (and with them the cables) and
        their ``/etc/netns`` folders. Safe to call twice, and on a cluster never started."""
        existing = self.namespaces() if _which("ip") else []
        for namespace in existing:
            _kill_namespace(namespace)
        for namespace in existing:
            _run("ip", "netns", "del", namespace, check=False)
        if NETNS_ETC.is_dir():
            for folder in NETNS_ETC.glob(self.prefix + "-*"):
                shutil.rmtree(folder, ignore_errors=True)
        self.started = False

    # -- running things on a host ----------------------------------------------------------

    def host(self, which: int | str | Host) -> Host:
        if isinstance(which, Host):
            return which
        if isinstance(which, int):
            return self.hosts[which]
        for host in self.hosts:
            if which in (host.name, host.namespace):
                return host
        raise KeyError(f"no host {which!r} in this cluster ({', '.join(h.name for h in self.hosts)})")

    def command(self, which: int | str | Host, argv: Sequence[str]) -> list[str]:
        """``argv`` as run on a host: in its namespace, under its own hostname."""
        host = self.host(which)
        return [_which("ip") or "ip", "netns", "exec", host.namespace,
                _which("unshare") or "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                host.name, *map(str, argv)]

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment, plus every host's ``name=address`` in ``HOSTS_ENV`` and this
        process as the starter of a launch there (on Linux a launcher ends with it: ``STARTER_ENV``)."""
        listing = ",".join(f"{host.name}={host.address}" for host in self.hosts)
        return {**os.environ, STARTER_ENV: str(os.getpid()), HOSTS_ENV: listing, **(extra or {})}

    def popen(self, which: int | str | Host, argv: Sequence[str], *,
              env: Mapping[str, str] | None = None, **kwargs) -> subprocess.Popen:
        """Start ``argv`` on a host; output is text, stdout and stderr apart unless told."""
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        return subprocess.Popen(self.command(which, argv), env=self.environment(env), **kwargs)

    def run(self, which: int | str | Host, argv: Sequence[str], *, timeout: float = 120,
            env: Mapping[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
        """Run ``argv`` on a host to its end; output captured as text."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(which, argv), env=self.environment(env),
                              timeout=timeout, **kwargs)

    def pids(self, which: int | str | Host) -> list[int]:
        """The processes running on a host (every process in its namespace)."""
        return _namespace_pids(self.host(which).namespace)

    def kill_processes(self, which: int | str | Host) -> list[int]:
        """SIGKILL every process on a host, as when the machine loses power; the pids killed."""
        return _kill_namespace(self.host(which).namespace)

    def _in(self, namespace: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run("ip", "netns", "exec", namespace, *argv, check=check)

    # -- breaking and slowing the network --------------------------------------------------

    def link(self, which: int | str | Host, up: bool) -> None:
        """Set a host's cable up or down (down: as if it were unplugged)."""
        host = self.host(which)
        self._in(host.namespace, "ip", "link", "set", host.interface, "up" if up else "down")

    def set_rate(self, mbit: float | None, *, burst_kbyte: int = 256) -> None:
        """Limit every host's outgoing link to ``mbit`` Mbit/s (``tc ... tbf``), or lift the
        limit (None). Both directions of a transfer between two hosts are limited, since each
        host's ``eth0`` shapes what it sends."""
        for host in self.hosts:
            self._in(host.namespace, "tc", "qdisc", "del", "dev", host.interface, "root", check=False)
            if mbit is not None:
                self._in(host.namespace, "tc", "qdisc", "add", "dev", host.interface, "root", "tbf",
                         "rate", f"{mbit}mbit", "burst", f"{burst_kbyte}kb", "latency", "100ms")

    def block_port(self, which: int | str | Host, port: int) -> None:
        """Drop (silently, as most firewalls do) TCP packets arriving from the network at ``port``
        on a host (nft; the host itself may still reach its own port, through ``lo``)."""
        if _which("nft") is None:
            raise RuntimeError("nft not found (Debian/Ubuntu: apt-get install nftables)")
        host = self.host(which)
        rules = ("table inet companion {\n chain input {\n"
                 "  type filter hook input priority 0; policy accept;\n"
                 f"  iifname != \"lo\" tcp dport {int(port)} drop\n }}\n}}\n")
        _run("ip", "netns", "exec", host.namespace, _which("nft"), "-f", "-", input=rules)

    def unblock(self, which: int | str | Host) -> None:
        """Remove the rules :meth:`block_port` added on a host."""
        self._in(self.host(which).namespace, _which("nft") or "nft", "delete", "table", "inet",
                 "companion", check=False)

    def add_dead_interface(self, which: int | str | Host, name: str = "eth1") -> str:
        """Give a host a second interface with an address in :data:`DEAD_SUBNET` that reaches no
        other host (a cable whose other end lies on the switch's floor, plugged into nothing);
        its address."""
        host = self.host(which)
        index = self.hosts.index(host)
        address = str(list(ipaddress.ip_network(DEAD_SUBNET).hosts())[index])
        loose = f"{self.prefix[:6]}d{index}"
        _run("ip", "link", "add", loose, "netns", self.switch, "type", "veth",
             "peer", "name", name, "netns", host.namespace)
        self._in(self.switch, "ip", "link", "set", loose, "up")
        self._in(host.namespace, "ip", "addr", "add", f"{address}/24", "dev", name)
        self._in(host.namespace, "ip", "link", "set", name, "up")
        return address


def _namespace_pids(namespace: str) -> list[int]:
    done = _run("ip", "netns", "pids", namespace, check=False)
    return [int(pid) for pid in done.stdout.split()]


def _kill_namespace(namespace: str) -> list[int]:
    pids = _namespace_pids(namespace)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline and _namespace_pids(namespace):
        time.sleep(0.05)
    return pids


@dataclass(frozen=True)
class Outcome:
    """How one host's command ended: its exit status (None: still running at the deadline, then
    killed), its output (stdout and stderr together) and the seconds it ran."""

    host: str
    returncode: int | None
    output: str
    seconds: float


def run_together(cluster: Cluster, commands: Mapping[int, Sequence[str]], *, timeout: float,
                 cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
                 ) -> list[Outcome]:
    """Start ``commands[i]`` on host ``i`` for each i at once; wait at most ``timeout`` seconds in
    all; kill whatever still runs then (what a learner does with Ctrl-C after waiting).

    Introduced in chapters/04_3_several_machines.ipynb.
    """
    started = time.monotonic()
    processes = {index: cluster.popen(index, argv, cwd=cwd, env=env, stderr=subprocess.STDOUT)
                 for index, argv in commands.items()}
    outcomes = []
    for index, process in processes.items():
        left = max(0.1, timeout - (time.monotonic() - started))
        try:
            output = process.communicate(timeout=left)[0]
            code = process.returncode
        except subprocess.TimeoutExpired:
            _kill_namespace(cluster.host(index).namespace)
            process.kill()
            output, code = process.communicate()[0], None
        outcomes.append(Outcome(cluster.host(index).name, code, output,
                                round(time.monotonic() - started, 1)))
    return outcomes


_SIGNS = re.compile(r"Error|error:|refused|unreachable|timed out|Timeout")


def symptom(outcome: Outcome, width: int = 150) -> str:
    """One line for what a learner sees on that host: the last error line of its output (not a
    traceback's code lines), or that it printed nothing and never exited.

    Introduced in chapters/04_3_several_machines.ipynb.
    """
    if outcome.returncode is None:
        lines = [line.strip() for line in outcome.output.splitlines() if line.strip()]
        last = f"; its last line: {lines[-1][:width]}" if lines else ", and printed nothing"
        return f"{outcome.host}: still running after {outcome.seconds:g} s (then killed){last}"
    found = [line.strip() for line in outcome.output.splitlines() if _SIGNS.search(line)
             and not line.strip().startswith(("File ", "raise ", "^", "frame #"))]
    found = [re.sub(r"^\[?[EW]\d{4} [\d:.]+ \d+ [\w./]+:\d+\] ", "", line) for line in found]
    text = found[-1] if found else "(no error line)"
    if len(text) > width:
        text = text[:width - 1] + "…"
    return f"{outcome.host}: exit {outcome.returncode} after {outcome.seconds:g} s: {text}"
