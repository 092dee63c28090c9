"""The unit tier refuses to start a process, however a test tries (tests/unit/conftest.py)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.unit.conftest import ProcessStarted


@pytest.mark.parametrize("start", [
    lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
    lambda: subprocess.check_output(["true"]),
    lambda: os.system("true"),
    lambda: os.fork(),
    lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
    lambda: multiprocessing.get_context("fork").Process(target=print).start(),
], ids=["subprocess.run", "check_output", "os.system", "os.fork", "spawn", "fork"])
def test_every_way_of_starting_a_process_is_refused(start):
    with pytest.raises(ProcessStarted, match="move this test to tests/system/"):
        start()


def test_a_loader_with_workers_is_refused_but_one_without_runs():
    data = TensorDataset(torch.arange(8.0))
    assert sum(len(batch[0]) for batch in DataLoader(data, batch_size=4)) == 8
    with pytest.raises(ProcessStarted):
        next(iter(DataLoader(data, batch_size=4, num_workers=1)))
