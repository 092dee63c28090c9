"""common.fast.profiling: the data-wait meter on loaders with known artificial delays — the tests that start processes (the rest: tests/unit/test_profiling.py)."""

from __future__ import annotations

import time

import pytest
from torch.utils.data import DataLoader

from common.fast.profiling import DataWaitMeter
from tests.helpers import ReadLog, SleepyDataset, overlap, read_intervals


@pytest.mark.slow
def test_workers_make_the_next_batches_while_the_step_runs(tmp_path):
    # 2 workers each need 0.03 s per batch; the step takes 0.06 s: the workers read while the
    # loop steps (a fact of the overlap; how much of the wait it hides is a timing, left to the chapter)
    log = tmp_path / "reads.log"
    loader = DataLoader(ReadLog(SleepyDataset(12, 0.03), log), batch_size=1, num_workers=2)
    meter, steps = DataWaitMeter(), []
    for _ in meter.wrap(loader):
        start = time.monotonic()
        time.sleep(0.06)
        steps.append((start, time.monotonic()))
    reads = read_intervals(log)
    assert len(reads) == 12 and len({pid for pid, _, _ in reads}) == 2
    assert any(overlap(read[1:], step) for read in reads for step in steps), \
        "no batch was read while the loop stepped"
    assert len(meter.waits) == len(meter.steps) == 12
    assert meter.wait_s == pytest.approx(sum(meter.waits[1:]))  # the first wait, start-up, set aside
