"""common.ddp.preflight on two hosts (network namespaces): it passes on a healthy cluster and names
each classic multi-node failure: the endpoint ``localhost`` on the second node, a second interface
that does not route, a port a firewall drops (nft), a hostname that resolves to 127.0.1.1,
``--nnodes`` that differ between nodes, and a port held by a silent listener.

The checks that meet at a store (and import torch for it) share one cluster, each on a port of its
own, their preflights forked from a server per host that imported torch once
(``tests.system.cluster.preflight(..., forked=True)``); a check that changes a host's network or
files has a cluster of its own."""

from __future__ import annotations

import sys

import pytest

from tests.system.cluster import (
    PORT,
    PREFLIGHT_LIBRARIES,
    builder,
    finish,
    powered_off_after,
    preflight,
    served_hosts,
    start,
)

ENDPOINT = f"node0:{PORT}"
SILENT = ("import socket, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          f"s.bind(('0.0.0.0', {PORT})); s.listen(); print('listening', flush=True)\n"
          "held = []\n"
          "while True: held.append(s.accept())\n")
#: A node checked alone, for a check before the port's: nothing serves the endpoint, so the port
#: check that follows waits its whole ``--timeout`` (10 s by default) for nothing the test reads.
NO_SERVER = ("--timeout", "1")


@pytest.fixture
def make_cluster():
    yield from builder()


@pytest.fixture(scope="module")
def shared_cluster():
    yield from served_hosts("m", libraries=PREFLIGHT_LIBRARIES)


@pytest.fixture
def cluster(shared_cluster):
    """The module's two hosts, as built; what a test leaves running on them is killed after it."""
    yield from powered_off_after(shared_cluster)


def _lines(output: str, status: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(f"[{status}]")]


def _check(output: str, name: str) -> str:
    """The verdict line of one check, its spacing squeezed: ``[FAIL] port ...``."""
    found = [" ".join(line.split()) for line in output.splitlines()
             if line.startswith("[") and line.split()[1:2] == [name]]
    assert len(found) == 1, output
    return found[0]


def test_a_healthy_cluster_passes_and_names_the_interface(cluster):
    server = preflight(cluster, 0, "--endpoint", ENDPOINT, "--nnodes", "2", "--serve", forked=True)
    client = preflight(cluster, 1, "--endpoint", ENDPOINT, "--nnodes", "2", forked=True)
    outputs = finish([server, client], timeout=120)
    for process, output in zip((server, client), outputs, strict=True):
        assert process.returncode == 0, output
        assert not _lines(output, "FAIL"), output
        assert "2 nodes met: node" in output and "every node says --nnodes 2" in output, output
        assert "verdict: ready for torchrun" in output
    assert "node1 resolves to 10.213.7.2 (eth0)" in outputs[1]
    assert "export GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0" in outputs[1]
    assert f"{ENDPOINT} answers as a c10d store" in outputs[1]


def test_localhost_as_the_endpoint_on_the_second_node(make_cluster):
    cluster = make_cluster(2)
    done = finish([preflight(cluster, 1, "--endpoint", f"localhost:{PORT}", "--nnodes", "2")])[0]
    assert "[FAIL] endpoint" in done and "this node's own loopback" in done, done
    assert "must name the first node" in done and "verdict: FAIL (endpoint)" in done


def test_a_second_interface_that_does_not_route(make_cluster):
    cluster = make_cluster(2)
    cluster.add_dead_interface(1, "eth1")
    done = finish([preflight(cluster, 1, "--endpoint", ENDPOINT, "--nnodes", "2", *NO_SERVER,
                             GLOO_SOCKET_IFNAME="eth1")])[0]
    assert _check(done, "interface").startswith("[FAIL]"), done
    assert "GLOO_SOCKET_IFNAME=eth1, but the route to 10.213.7.1 leaves through eth0" in done
    assert "Fix: export GLOO_SOCKET_IFNAME=eth0" in done


def test_the_hostname_on_a_second_interface_that_does_not_route(make_cluster):
    cluster = make_cluster(2)
    dead = cluster.add_dead_interface(1, "eth1")
    hosts = cluster.hosts_file(cluster.hosts[1]).replace("10.213.7.2\tnode1", f"{dead}\tnode1")
    cluster.write_hosts_file(cluster.hosts[1], hosts)
    done = finish([preflight(cluster, 1, "--endpoint", ENDPOINT, "--nnodes", "2", *NO_SERVER)])[0]
    assert f"the hostname resolves to {dead} on eth1, but the route to 10.213.7.1 leaves " \
           "through eth0" in done, done


def test_a_port_dropped_by_a_firewall_on_the_first_node(cluster):
    port = PORT + 1
    endpoint = f"node0:{port}"
    cluster.block_port(0, port)  # nft: tcp dport 29501 drop, in node0's namespace only
    try:
        server = preflight(cluster, 0, "--endpoint", endpoint, "--nnodes", "2", "--serve",
                           "--timeout", "4", forked=True)
        client = preflight(cluster, 1, "--endpoint", endpoint, "--nnodes", "2", "--timeout", "4",
                           forked=True)
        out_server, out_client = finish([server, client], timeout=120)
    finally:
        cluster.unblock(0)
    assert client.returncode == 1
    assert _check(out_client, "port").startswith(f"[FAIL] port {endpoint} did not answer within 4 s")
    assert "dropped, as a firewall does" in out_client and f"open TCP port {port}" in out_client
    # node0 itself saw the port free and waited in vain: one node of two
    assert _check(out_server, "nodes").startswith("[FAIL] nodes 1 of 2 nodes met within 4 s")


def test_a_hostname_that_resolves_to_127_0_1_1(make_cluster):
    cluster = make_cluster(2, loopback_hostname=True)
    done = finish([preflight(cluster, 1, "--endpoint", ENDPOINT, "--nnodes", "2", *NO_SERVER)])[0]
    assert _check(done, "hostname").startswith(
        "[FAIL] hostname node1 resolves to 127.0.1.1, a loopback address (the 127.0.1.1 trap")


def test_nodes_that_disagree_on_nnodes(cluster):
    endpoint = f"node0:{PORT + 2}"
    # 10 s, not 5: under a 4-worker test run the client once started more than 5 s after the server
    server = preflight(cluster, 0, "--endpoint", endpoint, "--nnodes", "2", "--serve",
                       "--timeout", "10", forked=True)
    client = preflight(cluster, 1, "--endpoint", endpoint, "--nnodes", "3", "--timeout", "10",
                       forked=True)
    for process, output in zip((server, client), finish([server, client], timeout=120),
                               strict=True):
        assert process.returncode == 1, output
        assert _check(output, "nnodes").startswith("[FAIL] nnodes the nodes disagree on --nnodes")
        assert "(--nnodes 2)" in output and "(--nnodes 3)" in output


def test_a_silent_listener_on_the_endpoint_port(make_cluster):
    cluster = make_cluster(2)
    listener = start(cluster, 0, [sys.executable, "-c", SILENT])
    assert listener.stdout.readline().strip() == "listening"
    client = preflight(cluster, 1, "--endpoint", ENDPOINT, "--nnodes", "2", "--timeout", "3")
    server = preflight(cluster, 0, "--endpoint", ENDPOINT, "--nnodes", "2", "--serve",
                       "--timeout", "3")
    out_client, out_server = finish([client, server], timeout=120)
    assert "accepts connections and never answers (a silent listener)" in out_client, out_client
    assert _check(out_server, "port").startswith(f"[FAIL] port {PORT} is held by a silent listener")
    listener.kill()
    listener.communicate()
