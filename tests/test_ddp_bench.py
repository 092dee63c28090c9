"""common.ddp.bench: the four setups, the step cap that keeps every run inside one epoch."""

from __future__ import annotations

import pytest

from common.ddp.bench import Setup, setups, steps_within_epoch, summarize


def test_setups_compare_strong_weak_and_the_worker_baseline():
    runs = setups(32)
    assert [(s.ranks, s.global_batch, s.workers) for s in runs] == [
        (1, 32, 0), (1, 32, 1), (2, 32, 0), (2, 64, 0)]
    assert [s.name for s in setups(32, ranks=1)] == ["1 rank", "1 rank + 1 worker"]


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
