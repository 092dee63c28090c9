"""common.fast.profiling: the data-wait meter on loaders with known artificial delays — the tests that start processes (the rest: tests/unit/test_profiling.py)."""

from __future__ import annotations

import pytest

from tests.helpers import data_wait


@pytest.mark.slow
def test_workers_hide_the_data_delay_behind_the_step():
    # 2 workers each need 0.03 s per batch; the step takes 0.06 s, so after the
    # first batch the next one is always ready: the wait all but disappears.
    meter = data_wait(0.03, 0.06, num_workers=2, length=12)
    assert meter.fraction < 0.3
    assert meter.first_wait_s > max(meter.waits[1:])  # start-up is set aside
