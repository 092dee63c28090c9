"""common/ddp/preflight.py without processes: its flags, each check on a described machine, and the
store probe against a real TCPStore and a silent listener (threads in this process)."""

from __future__ import annotations

import socket
import threading
from datetime import timedelta

import pytest

from common.ddp import preflight as pf

TABLE = {"lo": ["127.0.0.1"], "eth0": ["10.0.0.2"], "eth1": ["192.168.9.2"]}


@pytest.mark.parametrize(("argv", "message"), [
    (["--nnodes", "2"], "--endpoint"),
    (["--endpoint", "node0", "--nnodes", "2"], "is not HOST:PORT"),
    (["--endpoint", "node0:70000", "--nnodes", "2"], "is not HOST:PORT"),
    (["--endpoint", "node0:29500", "--nnodes", "two"], "is not N or MIN:MAX"),
    (["--endpoint", "node0:29500", "--nnodes", "3:2"], "need 1 <= MIN <= MAX"),
    (["--endpoint", "node0:29500", "--nnodes", "2", "--timeout", "0"], "0 < seconds"),
])
def test_bad_flags_are_argparse_errors_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as raised:
        pf.main(argv)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert message in err.strip().splitlines()[-1] and "Traceback" not in err


def test_flags_parse():
    args = pf.build_parser().parse_args(["--endpoint", "node0:29500", "--nnodes", "1:4", "--serve"])
    assert (args.endpoint, args.nnodes, args.serve, args.timeout) == (("node0", 29500), (1, 4),
                                                                       True, 10.0)


def test_hostname_on_loopback_is_the_127_0_1_1_trap():
    check = pf.check_hostname("node1", ["127.0.1.1"], TABLE)
    assert check.status == pf.FAIL and "127.0.1.1 trap" in check.message
    assert pf.check_hostname("node1", ["10.0.0.2"], TABLE) == \
        pf.Check("hostname", pf.OK, "node1 resolves to 10.0.0.2 (eth0)")
    assert "does not resolve" in pf.check_hostname("node1", [], TABLE).message
    assert "no interface" in pf.check_hostname("node1", ["10.9.9.9"], TABLE).message


def test_localhost_endpoint_fails_only_with_several_nodes():
    assert pf.check_endpoint("localhost", 29500, ["127.0.0.1"], (2, 2)).status == pf.FAIL
    assert pf.check_endpoint("localhost", 29500, ["127.0.0.1"], (1, 1)).status == pf.OK
    assert pf.check_endpoint("node0", 29500, ["10.0.0.1"], (1, 2)).status == pf.OK
    assert "does not resolve" in pf.check_endpoint("nod0", 29500, [], (2, 2)).message


def test_interface_names_the_route_and_a_wrong_choice():
    route = {"10.0.0.1": "10.0.0.2"}.__getitem__
    fine = pf.check_interface("10.0.0.1", ["10.0.0.2"], TABLE, {}, source=route)
    assert fine.status == pf.OK and "export GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0" in \
        fine.message
    wrong = pf.check_interface("10.0.0.1", ["10.0.0.2"], TABLE, {"NCCL_SOCKET_IFNAME": "eth1"},
                               source=route)
    assert wrong.status == pf.FAIL and "NCCL_SOCKET_IFNAME=eth1, but the route" in wrong.message
    other = pf.check_interface("10.0.0.1", ["192.168.9.2"], TABLE, {}, source=route)
    assert other.status == pf.FAIL and "resolves to 192.168.9.2 on eth1" in other.message

    def unreachable(address):
        raise OSError(101, "Network is unreachable")

    assert "no route" in pf.check_interface("10.0.0.1", [], TABLE, {}, source=unreachable).message


def test_nodes_compare_nnodes_versions_and_clocks():
    facts = [{"host": "node0", "nnodes": "2", "torch": "2.6", "cuda": None, "nccl": None,
              "python": "3.11"},
             {"host": "node1", "nnodes": "3", "torch": "2.5", "cuda": None, "nccl": None,
              "python": "3.11"}]
    checks = {c.name: c for c in pf.compare_nodes(facts, [100.0, 103.0], (2, 2), 5)}
    assert checks["nodes"].status == pf.OK
    assert checks["nnodes"].status == pf.FAIL and "(--nnodes 3)" in checks["nnodes"].message
    assert checks["torch"].status == pf.FAIL and "node1 2.5" in checks["torch"].message
    assert checks["python"].status == pf.OK and checks["clock"].status == pf.WARN
    alone = {c.name: c for c in pf.compare_nodes(facts[:1], [1.0], (2, 2), 5)}
    assert alone["nodes"].status == pf.FAIL and "1 of 2 nodes met within 5 s" in \
        alone["nodes"].message


def _silent_listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []
    threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
    return server, held


def test_probe_tells_a_store_from_a_silent_listener_and_a_closed_port():
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=5))
    assert pf.probe_store("127.0.0.1", store.port, timeout=3) == "store"
    server, _held = _silent_listener()
    with server:
        assert pf.probe_store("127.0.0.1", server.getsockname()[1], timeout=0.5) == "silent"
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert pf.probe_store("127.0.0.1", port, timeout=0.5) == "refused"
    check = pf.check_port_remote("node0", "127.0.0.1", port, timeout=0.3)
    assert check.status == pf.FAIL and "refused the connection" in check.message


def test_port_held_here_by_a_silent_listener_is_named():
    server, _held = _silent_listener()
    with server:
        check = pf.check_port_here(server.getsockname()[1], timeout=0.5)
    assert check.status == pf.FAIL and "silent listener" in check.message


def test_verdict_lines_are_one_per_check():
    line = pf.Check("port", pf.FAIL, "29500 is busy").line()
    assert line.split() == ["[FAIL]", "port", "29500", "is", "busy"] and "\n" not in line
