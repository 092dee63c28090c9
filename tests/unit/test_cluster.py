"""common/ddp/cluster.py without namespaces: the hosts it plans, their hosts files, the commands
that run on them, and the one-line symptoms (building a cluster: tests/system/test_cluster_*.py)."""

from __future__ import annotations

import pytest

from common.ddp.cluster import Cluster, Outcome, symptom


def test_hosts_get_names_addresses_and_a_hosts_file_listing_everyone():
    cluster = Cluster(3, prefix="u43")
    assert [(h.name, h.namespace, h.address) for h in cluster.hosts] == [
        ("node0", "u43-node0", "10.213.7.1"), ("node1", "u43-node1", "10.213.7.2"),
        ("node2", "u43-node2", "10.213.7.3")]
    assert cluster.hosts_file(cluster.hosts[1]).splitlines() == [
        "127.0.0.1\tlocalhost", "10.213.7.1\tnode0", "10.213.7.2\tnode1", "10.213.7.3\tnode2"]
    trap = Cluster(2, prefix="u43", loopback_hostname=True)
    assert trap.hosts_file(trap.hosts[1]).splitlines() == [
        "127.0.0.1\tlocalhost", "127.0.1.1\tnode1", "10.213.7.1\tnode0"]


def test_only_private_subnets_and_sane_sizes():
    with pytest.raises(ValueError, match="not private"):
        Cluster(2, subnet="8.8.8.0/24")
    with pytest.raises(ValueError, match="1 to 200"):
        Cluster(0)


def test_a_command_runs_in_the_namespace_under_the_hostname():
    cluster = Cluster(2, prefix="u43")
    argv = cluster.command("node1", ["hostname"])
    assert argv[1:4] == ["netns", "exec", "u43-node1"]
    assert argv[-2:] == ["node1", "hostname"] and "--uts" in argv
    assert cluster.environment()["COMPANION_CLUSTER_HOSTS"] == "node0=10.213.7.1,node1=10.213.7.2"
    with pytest.raises(KeyError, match="no host 'node7'"):
        cluster.host("node7")


def test_symptoms_are_one_line():
    trace = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
             "    raise RendezvousTimeoutError\n"
             "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n")
    assert symptom(Outcome("node1", 1, trace, 12.0)) == \
        "node1: exit 1 after 12 s: torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"
    assert symptom(Outcome("node1", None, "", 20.0)) == \
        "node1: still running after 20 s (then killed), and printed nothing"
