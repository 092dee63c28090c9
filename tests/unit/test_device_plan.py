"""The device plan: which device and backend each rank takes, simulated for any host."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from common.ddp.process_group import setup_distributed
from common.device import DevicePlan, device_plan_from_env, get_device, plan_device
from common.fsdp.elastic import agents_env, elastic_command

CPU = torch.device("cpu")


def host_plans(ranks: int, gpus: int, *, mps: bool = False, forced: str | None = None,
               ranks_per_host: int | None = None) -> list[DevicePlan]:
    """The plan of every rank that ``torchrun --nproc-per-node=ranks`` starts on one host."""
    return [plan_device(rank=r, local_rank=r, local_world_size=ranks, world_size=ranks,
                        cuda_count=gpus, mps=mps, forced=forced, ranks_per_host=ranks_per_host)
            for r in range(ranks)]


def elastic_plans(world_size: int, gpus: int, *, ranks_per_host: int | None) -> list[DevicePlan]:
    """Two agents on one host, one worker each: every worker has LOCAL_RANK 0 of 1."""
    return [plan_device(rank=r, local_rank=0, local_world_size=1, world_size=world_size,
                        cuda_count=gpus, mps=False, forced=None, ranks_per_host=ranks_per_host)
            for r in range(world_size)]


@pytest.mark.parametrize("gpus", [0, 1, 2, 8])
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_each_rank_gets_its_own_gpu_or_every_rank_the_cpu(gpus, ranks):
    plans = host_plans(ranks, gpus)
    assert len({plan.backend for plan in plans}) == 1, "all ranks must agree on the backend"
    if gpus >= ranks:
        assert [plan.device for plan in plans] == [torch.device("cuda", r) for r in range(ranks)]
        assert all(plan.backend == "nccl" and plan.reason is None for plan in plans)
    else:
        assert all(plan.device == CPU and plan.backend == "gloo" for plan in plans)
        assert len({plan.reason for plan in plans}) == 1
        gpu_words = "no GPU" if gpus == 0 else f"{gpus} GPU"
        if ranks == 1:
            assert plans[0].reason == "1 process, no GPU -> cpu"
        else:
            assert plans[0].reason.startswith(f"{ranks} ranks on this host, {gpu_words}")
            assert "-> every rank on cpu with gloo" in plans[0].reason
            assert ("NCCL needs one GPU per rank" in plans[0].reason) == (gpus > 0)


def test_mps_serves_one_process_but_never_a_process_group():
    assert host_plans(1, 0, mps=True) == [DevicePlan(torch.device("mps"), "gloo", None)]
    plans = host_plans(2, 0, mps=True)
    assert all(plan.device == CPU and plan.backend == "gloo" for plan in plans)
    assert "Apple MPS" in plans[0].reason and "no collectives on MPS" in plans[0].reason
    forced = host_plans(2, 0, mps=True, forced="mps")
    assert forced == plans


def test_mps_in_a_process_group_of_one_runs_on_the_cpu(monkeypatch):
    # torchrun --nproc_per_node=1 on a Mac: a process group of one, whose gloo broadcast (DDP's
    # first step) refuses MPS tensors; the same process without torchrun keeps MPS.
    grouped = plan_device(rank=0, local_rank=0, local_world_size=1, world_size=1, cuda_count=0,
                          mps=True, forced=None, in_group=True)
    assert grouped.device == CPU and grouped.backend == "gloo"
    assert grouped.reason.startswith("1 rank on this host, Apple MPS -> every rank on cpu")
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_plan_from_env(env).device == CPU
    assert device_plan_from_env({}).device == torch.device("mps")


def test_forced_cpu_wins_over_eight_gpus():
    plans = host_plans(2, 8, forced="cpu")
    assert all(plan.device == CPU and plan.backend == "gloo" for plan in plans)
    assert plans[0].reason == ("2 ranks on this host, COMPANION_DEVICE=cpu -> every rank on cpu "
                               "with gloo")
    assert host_plans(1, 8, forced="cpu")[0].reason == "1 process, COMPANION_DEVICE=cpu -> cpu"


def test_forced_cuda_is_honoured_or_a_clear_error():
    assert [p.device.index for p in host_plans(2, 2, forced="cuda")] == [0, 1]
    assert host_plans(1, 2, forced="cuda:1") == [DevicePlan(torch.device("cuda", 1), "nccl", None)]
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        host_plans(2, 0, forced="cuda")
    with pytest.raises(RuntimeError, match="2 ranks on this host but it has 1 GPU"):
        host_plans(2, 1, forced="cuda")
    with pytest.raises(RuntimeError, match="this host has 2 GPU"):
        host_plans(1, 2, forced="cuda:3")
    with pytest.raises(RuntimeError, match="all 2 ranks on this host on one GPU"):
        host_plans(2, 2, forced="cuda:1")
    with pytest.raises(RuntimeError, match="MPS is not available"):
        host_plans(1, 0, forced="mps")


def test_elastic_agents_on_one_host_do_not_collide_on_cuda0():
    # Without the launcher's count both workers are LOCAL_RANK 0 of 1 and take cuda:0:
    # the collision NCCL refuses, which COMPANION_RANKS_PER_HOST exists to prevent.
    assert [p.device for p in elastic_plans(2, 2, ranks_per_host=None)] == [
        torch.device("cuda", 0)] * 2
    assert [p.device for p in elastic_plans(2, 2, ranks_per_host=2)] == [
        torch.device("cuda", 0), torch.device("cuda", 1)]
    for gpus in (0, 1):  # too few GPUs: the CPU, at world size 1 as well as 2 (one device per run)
        for world_size in (1, 2):
            plans = elastic_plans(world_size, gpus, ranks_per_host=2)
            assert all(p.device == CPU and p.backend == "gloo" for p in plans)
            assert plans[0].reason.startswith("2 ranks on this host")
    assert elastic_plans(1, 2, ranks_per_host=2)[0].device == torch.device("cuda", 0)


def test_elastic_launchers_tell_workers_how_many_ranks_share_the_host():
    one = elastic_command("common.fsdp.train", endpoint="127.0.0.1:1")
    two = elastic_command("common.fsdp.train", endpoint="127.0.0.1:1", nproc_per_node=2)
    assert agents_env([one, one])["COMPANION_RANKS_PER_HOST"] == "2"
    assert agents_env([one, two])["COMPANION_RANKS_PER_HOST"] == "3"
    assert agents_env([one, one])["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def fake_cuda(monkeypatch, count: int, *, mps: bool = False) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(("gpus", "mps"), [(0, False), (0, True), (1, False), (8, False)])
def test_one_process_plan_is_get_devices_choice(monkeypatch, gpus, mps):
    fake_cuda(monkeypatch, gpus, mps=mps)
    monkeypatch.delenv("COMPANION_DEVICE", raising=False)
    assert device_plan_from_env({}).device.type == get_device().type
    monkeypatch.setenv("COMPANION_DEVICE", "cpu")
    assert device_plan_from_env().device == get_device() == CPU


def test_env_reader_reads_torchrun_companion_and_torch(monkeypatch):
    fake_cuda(monkeypatch, 1)
    two_ranks = {"RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"}
    assert device_plan_from_env(two_ranks).device == CPU
    assert device_plan_from_env({}) == DevicePlan(torch.device("cuda", 0), "nccl", None)
    assert device_plan_from_env({"COMPANION_DEVICE": "cpu"}).device == CPU
    assert device_plan_from_env({"COMPANION_DEVICE": "cpu"}, prefer="cuda").device.type == "cuda"
    elastic = {"RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "2",
               "COMPANION_RANKS_PER_HOST": "2"}
    assert device_plan_from_env(elastic).device == CPU
    fake_cuda(monkeypatch, 2)
    assert device_plan_from_env(two_ranks).device == torch.device("cuda", 1)
    assert device_plan_from_env(elastic).device == torch.device("cuda", 1)
    fake_cuda(monkeypatch, 0)
    assert device_plan_from_env(two_ranks).device == CPU


def simulate_setup(monkeypatch, *, rank: int, gpus: int) -> tuple[list, list]:
    """``setup_distributed`` as rank ``rank`` of 2 on a host with ``gpus`` GPUs, no real group."""
    fake_cuda(monkeypatch, gpus)
    for name, value in {"RANK": rank, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": 2,
                        "WORLD_SIZE": 2}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("COMPANION_DEVICE", raising=False)
    monkeypatch.delenv("COMPANION_RANKS_PER_HOST", raising=False)
    set_devices, groups = [], []
    monkeypatch.setattr(torch.cuda, "set_device", set_devices.append)
    monkeypatch.setattr(dist, "init_process_group", lambda **kwargs: groups.append(kwargs))
    info = setup_distributed()
    assert info.initialized and (info.rank, info.world_size) == (rank, 2)
    return set_devices, groups


def test_one_gpu_two_ranks_setup_stays_off_the_gpu(monkeypatch, capsys):
    set_devices, groups = simulate_setup(monkeypatch, rank=0, gpus=1)
    assert set_devices == [] and groups == [{"backend": "gloo", "device_id": None}]
    assert capsys.readouterr().err == ("device plan: 2 ranks on this host, 1 GPU -> every rank on "
                                       "cpu with gloo (NCCL needs one GPU per rank)\n")
    simulate_setup(monkeypatch, rank=1, gpus=1)
    assert capsys.readouterr() == ("", ""), "only rank 0 says why"


def test_two_gpus_two_ranks_setup_sets_the_device_before_nccl(monkeypatch, capsys):
    set_devices, groups = simulate_setup(monkeypatch, rank=1, gpus=2)
    cuda1 = torch.device("cuda", 1)
    assert set_devices == [cuda1] and groups == [{"backend": "nccl", "device_id": cuda1}]
    simulate_setup(monkeypatch, rank=0, gpus=2)
    assert capsys.readouterr().err == "", "no reason to give when each rank has its own GPU"
