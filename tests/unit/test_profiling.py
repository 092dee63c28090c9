"""common.fast.profiling: the data-wait meter on loaders with known artificial delays."""

from __future__ import annotations

import time

import pytest

from common.fast.profiling import STAGES, DataWaitMeter, time_stages
from tests.helpers import data_wait


def test_equal_data_and_step_time_is_about_half():
    meter = data_wait(0.03, 0.03)
    assert 0.3 < meter.fraction < 0.7
    assert len(meter.waits) == 9 and len(meter.steps) == 9


def test_data_bound_loop_waits_almost_always():
    assert data_wait(0.03, 0.0).fraction > 0.8


def test_compute_bound_loop_hardly_waits():
    assert data_wait(0.0, 0.03).fraction < 0.2


def test_first_batch_is_excluded_unless_asked():
    meter = DataWaitMeter()
    for number, _ in enumerate(meter.wrap([1, 2, 3, 4])):
        time.sleep(0.05 if number == 0 else 0.0)
    with_first = DataWaitMeter(include_first=True, waits=meter.waits, steps=meter.steps)
    assert with_first.total_s > meter.total_s + 0.04
    assert meter.summary()["batches"] == 4


def test_early_break_counts_finished_iterations_only():
    meter = DataWaitMeter()
    for number, _ in enumerate(meter.wrap(range(10))):
        if number == 3:
            break
    assert len(meter.steps) == 3 and len(meter.waits) == 4
    assert 0.0 <= meter.fraction <= 1.0


def test_fraction_needs_counted_iterations():
    meter = DataWaitMeter()
    list(meter.wrap([1]))
    with pytest.raises(ValueError, match="no iterations"):
        _ = meter.fraction


def test_time_stages_reports_every_stage(tiny_data):
    paths = sorted(tiny_data.images_dir("train").glob("*.jpg"))[:6]
    frame = time_stages(paths, batch_size=4)
    assert list(frame["stage"]) == list(STAGES)
    assert (frame["ms_per_image"] >= 0).all() and frame["ms_per_image"].sum() > 0
    assert frame["share"].sum() == pytest.approx(1.0)
