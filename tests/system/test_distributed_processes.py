"""Tests for common.ddp: the collectives and the device plan under torchrun — the tests that start processes (the rest: tests/unit/test_distributed.py, tests/unit/test_device_plan.py)."""

from __future__ import annotations

import pytest

from common.ddp.launch import torchrun_command
from tests.system.forked_ranks import run_forked


@pytest.mark.slow
def test_collectives_on_two_processes_and_companion_device_reaches_the_workers(monkeypatch):
    """One torchrun launch for both: the collectives' results, and the device plan that
    COMPANION_DEVICE=cpu makes every rank follow (the plan's cases: tests/unit/test_device_plan.py)."""
    monkeypatch.setenv("COMPANION_DEVICE", "cpu")
    # `torchrun -m` with a fresh Python per worker, as a learner's run starts them. The agent itself
    # is forked from tests/system/forked_ranks.py's server, which imported torch already.
    done = run_forked(torchrun_command("common.ddp.collectives_demo", nproc_per_node=2), timeout=180)
    lines = done.stdout.splitlines()
    identity = lines[lines.index("== identity") + 1:][:2]
    assert all("backend=gloo device=cpu" in line for line in identity), identity
    plan_line = ("device plan: 2 ranks on this host, COMPANION_DEVICE=cpu -> every rank on cpu "
                 "with gloo")
    assert done.stderr.splitlines().count(plan_line) == 1, done.stderr[-2000:]
    section = {title: lines[i + 1: i + 3] for i, title in enumerate(lines) if title.startswith("==")}
    assert "  rank 0: before=1" in lines and "  rank 1: before=2" in lines
    assert lines.count("  rank 0: after=3") == 1 and lines.count("  rank 1: after=3") == 1
    assert section["== broadcast from rank 0"] == ["  rank 0: [42.0, 7.0]", "  rank 1: [42.0, 7.0]"]
    gathered = "[[0.0, 1.0], [10.0, 11.0]]"
    assert section["== all_gather"] == [f"  rank 0: {gathered}", f"  rank 1: {gathered}"]
    assert all(line.endswith("True") for line in section["== barrier"])
    ddp = section["== DDP gradient of my half == gradient of the whole batch"]
    assert len(ddp) == 2 and all(": True (max diff" in line for line in ddp)
    assert "world_size=2 backend=gloo" in section["== identity"][1]
    cost = section["== all_reduce milliseconds by tensor size (float32 values)"]
    assert len(cost) == 2 and all(len(line.split(": ", 1)[1].split()) == 6 for line in cost)
