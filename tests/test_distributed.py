"""Tests for common/distributed.py: samplers, launch helpers, the collectives under torchrun."""

from __future__ import annotations

import socket

import pytest
import torch
from torch.utils.data import DistributedSampler

from common.ddp.launch import free_port, launch_env, run_command, torchrun_command
from common.ddp.process_group import (
    all_reduce_sum,
    gather_objects,
    is_main_process,
    setup_distributed,
)
from common.ddp.samplers import ResumableDistributedSampler, ShardSampler


@pytest.mark.parametrize(("size", "world_size"), [(13, 2), (13, 3), (4, 4), (2, 3)])
def test_shard_sampler_counts_every_sample_exactly_once(size, world_size):
    shards = [list(ShardSampler(size, rank=r, world_size=world_size)) for r in range(world_size)]
    assert sorted(i for shard in shards for i in shard) == list(range(size))
    assert [len(ShardSampler(size, rank=r, world_size=world_size)) for r in range(world_size)] \
        == [len(shard) for shard in shards]


def test_distributed_sampler_pads_with_duplicates_which_shard_sampler_avoids():
    padded = [i for r in range(2) for i in DistributedSampler(range(13), 2, r, shuffle=False)]
    assert len(padded) == 14 and len(set(padded)) == 13  # torch repeats one sample
    with pytest.raises(ValueError, match="rank must lie in 0..1"):
        ShardSampler(13, rank=2, world_size=2)


@pytest.mark.parametrize("start", [0, 1, 5, 12])
def test_resumable_sampler_continues_the_same_order(start):
    dataset = range(25)
    reference = DistributedSampler(dataset, num_replicas=2, rank=1, seed=3, drop_last=True)
    resumable = ResumableDistributedSampler(dataset, num_replicas=2, rank=1, seed=3,
                                            drop_last=True)
    reference.set_epoch(4)
    resumable.set_epoch(4, start=start)
    assert list(resumable) == list(reference)[start:]
    assert len(resumable) == 12 - start
    resumable.set_epoch(5)  # the next epoch starts from its beginning again
    reference.set_epoch(5)
    assert list(resumable) == list(reference)
    with pytest.raises(ValueError, match="start must lie in 0..12"):
        resumable.set_epoch(5, start=13)


def test_without_torchrun_one_process_and_no_group(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    info = setup_distributed(device_type="cpu")
    assert (info.rank, info.world_size, info.initialized, is_main_process()) == (0, 1, False, True)
    assert is_main_process()
    values = torch.tensor([1.0, 2.0])
    summed = all_reduce_sum(values)
    assert torch.equal(summed, values) and summed is not values
    assert gather_objects({"a": 1}) == [{"a": 1}]


def test_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 1024 <= port < 65536


def test_torchrun_command_forms():
    single = torchrun_command("common.x", ["--a", "1"], nproc_per_node=2)
    assert single[1:] == ["-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone",
                          "-m", "common.x", "--a", "1"]
    multi = torchrun_command("common.x", nproc_per_node=1, nnodes=2,
                             rdzv_endpoint="127.0.0.1:1234", rdzv_id="j", max_restarts=1)
    assert "--nnodes=2" in multi and "--rdzv-endpoint=127.0.0.1:1234" in multi
    assert "--rdzv-backend=c10d" in multi and "--max-restarts=1" in multi
    with pytest.raises(ValueError, match="needs an rdzv_endpoint"):
        torchrun_command("common.x", nnodes=2)
    env = launch_env(threads=1)
    assert env["OMP_NUM_THREADS"] == "1" and env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


@pytest.mark.slow
def test_collectives_on_two_processes():
    done = run_command(torchrun_command("common.ddp.collectives_demo", nproc_per_node=2))
    lines = done.stdout.splitlines()
    section = {title: lines[i + 1: i + 3] for i, title in enumerate(lines) if title.startswith("==")}
    assert "  rank 0: before=1" in lines and "  rank 1: before=2" in lines
    assert lines.count("  rank 0: after=3") == 1 and lines.count("  rank 1: after=3") == 1
    assert section["== broadcast from rank 0"] == ["  rank 0: [42.0, 7.0]", "  rank 1: [42.0, 7.0]"]
    gathered = "[[0.0, 1.0], [10.0, 11.0]]"
    assert section["== all_gather"] == [f"  rank 0: {gathered}", f"  rank 1: {gathered}"]
    assert all(line.endswith("True") for line in section["== barrier"])
    ddp = section["== DDP gradient of my half == gradient of the whole batch"]
    assert len(ddp) == 2 and all(": True (max diff" in line for line in ddp)
    assert "world_size=2 backend=gloo" in section["== identity"][1]
    cost = section["== all_reduce milliseconds by tensor size (float32 values)"]
    assert len(cost) == 2 and all(len(line.split(": ", 1)[1].split()) == 6 for line in cost)
