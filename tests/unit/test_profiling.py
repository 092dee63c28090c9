"""common.fast.profiling: the data-wait meter on loaders with known artificial delays."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from common.fast import profiling
from common.fast.profiling import STAGES, DataWaitMeter, time_stages
from tests.helpers import data_wait


class FakeClock:
    """A clock that moves only when told: the meter's readings are then exact."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(profiling, "time", SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


def timed_loop(clock: FakeClock, data_s: float, step_s: float, *, length: int = 9,
               first_extra_s: float = 0.0) -> DataWaitMeter:
    """The meter after a loop whose data takes ``data_s`` per batch and whose step ``step_s``."""
    def batches():
        for index in range(length):
            clock.advance(data_s + (first_extra_s if index == 0 else 0.0))
            yield index

    meter = DataWaitMeter()
    for _ in meter.wrap(batches()):
        clock.advance(step_s)
    return meter


def test_equal_data_and_step_time_is_half(clock):
    meter = timed_loop(clock, 0.03, 0.03)
    assert meter.fraction == pytest.approx(0.5)
    assert len(meter.waits) == 9 and len(meter.steps) == 9


def test_data_bound_loop_waits_always(clock):
    assert timed_loop(clock, 0.03, 0.0).fraction == pytest.approx(1.0)


def test_compute_bound_loop_never_waits(clock):
    assert timed_loop(clock, 0.0, 0.03).fraction == pytest.approx(0.0)


def test_the_meter_on_a_real_loader_with_sleeps_counts_every_batch():
    meter = data_wait(0.001, 0.001)  # real time: only what no busy machine can change is checked
    assert len(meter.waits) == 9 and len(meter.steps) == 9 and 0.0 <= meter.fraction <= 1.0


def test_first_batch_is_excluded_unless_asked(clock):
    meter = timed_loop(clock, 0.01, 0.02, length=4, first_extra_s=0.05)
    with_first = DataWaitMeter(include_first=True, waits=meter.waits, steps=meter.steps)
    assert meter.first_wait_s == pytest.approx(0.06)
    assert with_first.total_s == pytest.approx(meter.total_s + 0.06 + 0.02)
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
