"""common.ddp.bench: the setups, equal threads everywhere, the step cap inside one epoch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from common.ddp.bench import (
    THREADS_PER_PROCESS,
    WIDTH,
    Setup,
    measure,
    setups,
    steps_within_epoch,
    summarize,
    train_args,
    world_of_one,
)


def test_setups_compare_strong_weak_and_the_worker_baseline():
    runs = setups(32)
    assert [(s.ranks, s.global_batch, s.workers) for s in runs] == [
        (1, 32, 0), (1, 32, 1), (2, 32, 0), (2, 64, 0)]
    assert [s.name for s in setups(32, ranks=1)] == ["1 rank", "1 rank + 1 worker"]
    assert [s.name for s in setups(32, worker_baseline=False)] == [
        "1 rank", "2 ranks, strong", "2 ranks, weak"]


def test_scaling_names_what_is_held_fixed():
    one, strong, weak = setups(32, worker_baseline=False)
    assert [s.scaling(one) for s in (one, strong, weak)] == ["baseline", "strong", "weak"]
    assert (strong.per_rank_batch, weak.per_rank_batch) == (16, 32)


def test_every_run_gets_the_same_threads_and_flags_but_batch_and_workers(tmp_path: Path):
    assert THREADS_PER_PROCESS == 1
    argvs = [train_args(s, steps=14, data="", pipeline="cache", log=tmp_path / "log.jsonl")
             for s in setups(32)]
    for argv in argvs:
        assert argv[argv.index("--threads") + 1] == str(THREADS_PER_PROCESS)
        assert "--no-augment" in argv and argv[argv.index("--data-pipeline") + 1] == "cache"
        assert argv[argv.index("--width") + 1] == str(WIDTH) == "32", "the same, wide model"

    def without(argv: list[str], *flags: str) -> list[str]:
        return [a for i, a in enumerate(argv) if a not in flags and argv[i - 1] not in flags]
    rest = {tuple(without(a, "--batch-size", "--num-workers")) for a in argvs}
    assert len(rest) == 1, "the runs may differ only in batch and workers"


def test_steps_stop_before_the_first_epoch_ends():
    runs = setups(32)
    assert steps_within_epoch(960, runs, 25) == 14  # 960 // 64 = 15 steps: stop at 14
    assert steps_within_epoch(960 * 4, runs, 25) == 25
    with pytest.raises(ValueError, match="per-rank-batch"):
        steps_within_epoch(100, runs, 25)


def test_summarize_gives_ratios_to_both_baselines():
    runs = [Setup("a", 1, 8, 0), Setup("b", 1, 8, 1), Setup("c", 2, 16, 0)]
    results = {name: [{"samples_per_s": v, "data_wait_fraction": 0.5} for v in values]
               for name, values in {"a": [10, 30, 20], "b": [40, 40, 1], "c": [60, 60, 60]}.items()}
    table = summarize(runs, results).set_index("setup")
    assert table.loc["c", "vs_1_rank"] == pytest.approx(3.0)
    assert table.loc["c", "vs_1_rank_1_worker"] == pytest.approx(1.5)
    assert table.loc["a", "samples_per_s"] == 20
    assert table.loc["c", "scaling"] == "weak" and (table.threads_per_process == 1).all()


def test_summarize_without_the_worker_baseline():
    runs = setups(8, worker_baseline=False)
    results = {s.name: [{"samples_per_s": v, "data_wait_fraction": 0.0}]
               for s, v in zip(runs, (10, 15, 18), strict=True)}
    table = summarize(runs, results).set_index("setup")
    assert "vs_1_rank_1_worker" not in table
    assert table.vs_1_rank.tolist() == pytest.approx([1.0, 1.5, 1.8])
    assert table.scaling.tolist() == ["baseline", "strong", "weak"]


def test_an_in_process_run_times_steps_and_restores_the_threads(tiny_data):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # 24 training images at batch 4: 6 steps per epoch, 5 run, 3 timed after 2 warm-up
        done = measure(Setup("1 rank", 1, 4, 0), steps=5, data=str(tiny_data.root), in_process=True)
        assert torch.get_num_threads() == 2, "the run's --threads 1 must not stick to this process"
    finally:
        torch.set_num_threads(threads)
    assert done["world_size"] == 1 and done["timed_steps"] == 3 and done["samples_per_s"] > 0
    assert "RANK" not in os.environ and not torch.distributed.is_initialized(), \
        "the group of one is gone and the environment restored"


def test_world_of_one_is_what_torchrun_gives_a_single_worker():
    env = world_of_one()
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    assert env["MASTER_ADDR"] == "127.0.0.1" and 0 < int(env["MASTER_PORT"]) < 65536
