"""common.fast.benchmark: the quick mode writes a well-formed CSV and chart and prints the table."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from common.fast import costs
from common.fast.benchmark import GUIDE, LIMIT, MemoryBatches, verdict
from common.fast.costs import cache_payoff, epochs_curve, formulations
from common.fast.timing import COLUMNS, Result, summarize, time_epochs


def test_cache_payoff_counts_build_and_open():
    table = pd.DataFrame({"pipeline": [GUIDE, "torchvision_uint8", "cache_fused", LIMIT],
                          "num_workers": [0, 0, 0, 0],
                          "images_per_s": [100.0, 200.0, 1000.0, 1200.0]})
    payoff = cache_payoff(table, {"build_s": 4.0, "open_s": 0.0, "cache_mb": 1.0}, 1000)
    # per epoch the cache saves 1000/200 - 1000/1000 = 4 s: it pays off after 1 epoch
    assert payoff["break_even_epochs"] == pytest.approx(1.0)
    assert payoff["best_decoding"].startswith("torchvision_uint8")
    curve = epochs_curve(table, payoff, [1, 100])
    assert curve.loc[1, "cache (build included)"] == pytest.approx(200.0)
    assert curve.loc[100, "cache (build included)"] > 900


def test_time_epochs_stops_after_max_images():
    images = torch.zeros(100, 3, 2, 2)
    batches = MemoryBatches(images, torch.zeros(100), batch_size=10)
    assert time_epochs(batches, 100, min_seconds=0, max_images=30) > 0


def test_formulations_agree_and_are_all_timed():
    images = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    table = formulations(images, repeats=1, batch_size=4)
    assert len(table) == 5 and (table["images_per_s"] > 0).all()


def test_formulations_check_every_batch_outside_the_timed_loop(monkeypatch):
    # The timing reads a clock that moves 1 ms per reading and 1 s per check: a check inside the
    # timed loop would show as at most 8 images / 1 s; outside it every candidate times 8 / 0.001.
    clock, calls = [0.0], []

    def reading() -> float:
        clock[0] += 0.001
        return clock[0]

    def slow_check(out, expected):
        calls.append(out.shape)
        clock[0] += 1.0
        return True

    monkeypatch.setattr(costs, "time", SimpleNamespace(perf_counter=reading))
    monkeypatch.setattr(costs, "agrees", slow_check)
    images = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    table = formulations(images, repeats=2, batch_size=4)
    assert len(calls) == 5 * 2  # every candidate, every batch, once
    assert table["images_per_s"].tolist() == pytest.approx([8 / 0.001] * 5)


def test_formulations_refuse_a_wrong_result(monkeypatch):
    monkeypatch.setattr(costs, "agrees", lambda out, expected: False)
    images = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    with pytest.raises(AssertionError, match="does not give the normalized batch"):
        formulations(images, repeats=1, batch_size=4)


def test_summarize_uses_medians_and_the_guide_at_zero_workers():
    results = [Result(GUIDE, 0, [10.0, 30.0, 20.0]), Result(GUIDE, 2, [40.0, 40.0, 1.0]),
               Result("fast", 0, [100.0, 500.0, 400.0]), Result(LIMIT, 0, [450.0, 550.0])]
    table = summarize(results)
    assert list(table.columns) == COLUMNS
    assert table["images_per_s"].tolist() == [20.0, 40.0, 400.0, 500.0]
    assert table["speedup_vs_guide"].tolist() == [1.0, 2.0, 20.0, 25.0]
    result = verdict(table)
    assert result["best"].startswith("fast") and result["share_of_limit"] == pytest.approx(0.8)
    assert result["meets_targets"]
    with pytest.raises(ValueError, match="guide row"):
        summarize(results[2:])


def test_memory_batches_cover_every_image_once():
    images = torch.arange(10 * 3 * 2 * 2, dtype=torch.uint8).view(10, 3, 2, 2)
    batches = list(MemoryBatches(images, torch.arange(10), batch_size=4))
    assert len(batches) == len(MemoryBatches(images, torch.arange(10), batch_size=4)) == 3
    assert torch.equal(torch.cat([b[0] for b in batches]), images)
    assert torch.cat([b[1] for b in batches]).tolist() == list(range(10))
