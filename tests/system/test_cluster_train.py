"""Training across two hosts (network namespaces, tests/system/cluster.py) with torchrun's agent on
each (its workers forked: tests/speedups/agent.py): DDP and FSDP equal one process; a host lost
mid-run, under ``--max-restarts`` (the host comes back) and under elastic ``--nnodes=1:2`` (the
other host goes on alone), ends at the weights of the uninterrupted run from its checkpoint. The
hosts share this machine's file system, as nodes share NFS: data, checkpoints and the log are in
the test's temporary folder.

The module's tests share one cluster, each on a rendezvous port of its own, and every agent is
forked from a server on its host (``tests.system.cluster.start_forked``) that imported torch and
the workers' libraries once: a host that "loses power" loses the job's agent and workers
(``power_off``), not that server, and whatever a test leaves on the hosts is killed after it."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import torch

from common.ddp.train import main as ddp_main
from common.fsdp.elastic import elastic_command
from common.fsdp.train import main as fsdp_main
from common.synthetic import SyntheticConfig, ensure_data
from tests.speedups.agent import forked_workers
from tests.system.cluster import (
    PORT,
    finish,
    power_off,
    powered_off_after,
    served_hosts,
    start_forked,
    torchrun_argv,
)

RTOL, ATOL = 1.3e-6, 1e-5  # float32 tolerances of PyTorch's own distributed tests
#: The rendezvous after a host is lost waits until the lost agent's heartbeat is stale: torch's
#: default is 3 missed beats of 5 s (15 s of waiting); a beat a second, 2 missed, here.
QUICK_HEARTBEAT = "join_timeout=60,keep_alive_interval=1,keep_alive_max_attempt=2"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared_cluster():
    yield from served_hosts("m")


@pytest.fixture
def cluster(shared_cluster):
    """The module's two hosts; the processes a test leaves on them are killed after it."""
    yield from powered_off_after(shared_cluster)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    config = SyntheticConfig(seed=7, num_train=48, num_val=24, min_size=40, max_size=64)
    return ensure_data(tmp_path_factory.mktemp("cluster") / "shapes", config, verbose=False)


def _ddp_args(data, out, *extra) -> list[str]:
    return ["--tiny", "--data", str(data.root), "--save-final", str(out / "final.pt"),
            "--log-file", str(out / "log.jsonl"), *extra]


def _fsdp_args(data, out, *extra) -> list[str]:
    return [*_ddp_args(data, out), "--checkpoint", str(out / "ckpt"), *extra]


def _records(out, event: str) -> list[dict]:
    lines = (out / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def _assert_close(out, reference, **tolerance) -> None:
    actual = torch.load(out / "final.pt", weights_only=True)
    expected = torch.load(reference / "final.pt", weights_only=True)
    assert actual.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], **tolerance, msg=key)


def _wait_for(predicate, processes, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        ended = [p for p in processes if p.poll() is not None]
        if ended or time.monotonic() > deadline:
            pytest.fail("a host's agent ended (or the wait timed out) before the awaited event:\n"
                        + "\n----\n".join(_killed_output(p) for p in processes))
        time.sleep(0.1)


def _killed_output(process) -> str:
    """Kill the agent and read its output for a while: a worker it leaves behind holds the pipe
    (the fixture kills what runs on the hosts afterwards)."""
    process.kill()
    try:
        return process.communicate(timeout=10)[0][-2500:]
    except subprocess.TimeoutExpired:
        return "(output held open by a process the agent left behind)"


@pytest.fixture(scope="module")
def ddp_one(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_one")
    assert ddp_main(_ddp_args(data, out)) == 0
    return out


@pytest.fixture(scope="module")
def fsdp_one(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp_one")
    assert fsdp_main(_fsdp_args(data, out)) == 0
    return out


def test_ddp_on_two_hosts_equals_one_process(cluster, data, ddp_one, tmp_path):
    argv = torchrun_argv("common.ddp.train", _ddp_args(data, tmp_path, "--count-allreduces"),
                         nproc=1, endpoint=f"node0:{PORT}")
    agents = [start_forked(cluster, host, argv) for host in (0, 1)]
    for agent, output in zip(agents, finish(agents), strict=True):
        assert agent.returncode == 0, output[-3000:]
    done = _records(tmp_path, "done")[0]
    assert (done["world_size"], done["allreduce_syncs"]) == (2, done["step"])
    _assert_close(tmp_path, ddp_one, rtol=RTOL, atol=ATOL)


def test_fsdp_on_two_hosts_times_two_ranks_equals_one_process(cluster, data, fsdp_one, tmp_path):
    argv = torchrun_argv("common.fsdp.train", _fsdp_args(data, tmp_path, "--strategy", "fsdp"),
                         nproc=2, endpoint=f"node0:{PORT + 1}")
    agents = [start_forked(cluster, host, argv) for host in (0, 1)]
    for agent, output in zip(agents, finish(agents), strict=True):
        assert agent.returncode == 0, output[-3000:]
    assert _records(tmp_path, "start")[0]["world_size"] == 4
    _assert_close(tmp_path, fsdp_one, rtol=RTOL, atol=ATOL)


def test_a_host_lost_and_back_under_max_restarts_resumes_from_the_snapshot(
        cluster, data, ddp_one, tmp_path):
    argv = torchrun_argv("common.ddp.train", _ddp_args(
        data, tmp_path, "--snapshot", str(tmp_path / "snap.pt"), "--snapshot-every", "2",
        "--step-delay", "0.5"), nproc=1, max_restarts=1, rdzv_conf=QUICK_HEARTBEAT,
        endpoint=f"node0:{PORT + 2}")
    first = [start_forked(cluster, host, argv) for host in (0, 1)]
    _wait_for(lambda: (tmp_path / "log.jsonl").exists() and _records(tmp_path, "snapshot"), first)
    killed = power_off(cluster, 1)  # node1 loses power: its agent and worker, at once
    assert first[1].pid in killed or first[1].wait(timeout=10) is not None
    first[1].communicate()
    back = start_forked(cluster, 1, argv)  # the machine is back; the job's agent starts there again
    outputs = finish([first[0], back])
    assert first[0].returncode == 0 and back.returncode == 0, outputs[0][-3000:]
    resumed = _records(tmp_path, "resume")
    assert len(resumed) == 1 and resumed[0]["attempt"] >= 1 and resumed[0]["step"] >= 2
    assert _records(tmp_path, "done")[-1]["world_size"] == 2
    _assert_close(tmp_path, ddp_one, rtol=RTOL, atol=ATOL)


def test_a_host_lost_under_elastic_nnodes_leaves_one_that_goes_on(cluster, data, fsdp_one,
                                                                  tmp_path):
    options = {"endpoint": f"node0:{PORT + 3}", "max_restarts": 1, "keep_alive_interval": 1,
               "keep_alive_max_attempt": 2}
    args = _fsdp_args(data, tmp_path, "--checkpoint-every", "1", "--step-delay", "0.5")
    host = start_forked(cluster, 0, forked_workers(elastic_command(
        "common.fsdp.train", args, is_host=True, **options), "common.fsdp.train", args))
    guest = start_forked(cluster, 1, forked_workers(elastic_command(
        "common.fsdp.train", args, is_host=False, **options), "common.fsdp.train", args))

    def checkpointed_by_two() -> bool:
        if not (tmp_path / "log.jsonl").exists():
            return False
        records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
        starts = [i for i, r in enumerate(records) if r["event"] == "start" and r["world_size"] == 2]
        return bool(starts) and any(r["event"] == "checkpoint" and r["step"] >= 2
                                    for r in records[starts[0]:])

    _wait_for(checkpointed_by_two, [host, guest])
    power_off(cluster, 1)  # node1 is gone: its agent and workers at once
    guest.communicate()
    output = finish([host])[0]
    assert host.returncode == 0, output[-3000:]
    sizes = [r["world_size"] for r in _records(tmp_path, "start")]
    assert sizes[-2:] == [2, 1], sizes
    assert _records(tmp_path, "resume")[-1]["world_size"] == 1
    _assert_close(tmp_path, fsdp_one, rtol=RTOL, atol=ATOL)
