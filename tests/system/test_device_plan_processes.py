"""The device plan: which device and backend each rank takes, simulated for any host — the tests that start processes (the rest: tests/unit/test_device_plan.py)."""

from __future__ import annotations

import pytest

from common.ddp.launch import run_command, torchrun_command


@pytest.mark.slow
def test_companion_device_reaches_torchrun_workers(monkeypatch):
    monkeypatch.setenv("COMPANION_DEVICE", "cpu")
    done = run_command(torchrun_command("common.ddp.collectives_demo", nproc_per_node=2),
                       timeout=180)
    lines = done.stdout.splitlines()
    identity = lines[lines.index("== identity") + 1:][:2]
    assert all("backend=gloo device=cpu" in line for line in identity), identity
    plan_line = ("device plan: 2 ranks on this host, COMPANION_DEVICE=cpu -> every rank on cpu "
                 "with gloo")
    assert done.stderr.splitlines().count(plan_line) == 1, done.stderr[-2000:]
