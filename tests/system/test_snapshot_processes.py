"""Tests for common/ddp/snapshot.py: round trip, atomic writes, refusing bad files — the tests that start processes (the rest: tests/unit/test_snapshot.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers import SNAPSHOT_WRITER


@pytest.mark.slow
def test_kill_during_write_keeps_a_complete_latest_snapshot(tmp_path):
    path = tmp_path / "snap.pt"
    for _round in range(3):
        writer = subprocess.Popen([sys.executable, "-c", SNAPSHOT_WRITER, str(path)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            writer.stdout.readline()  # at least one complete snapshot exists
            deadline = time.monotonic() + 30
            while not list(tmp_path.glob(".snap.pt.*.tmp")) and time.monotonic() < deadline:
                time.sleep(0.001)
            assert list(tmp_path.glob(".snap.pt.*.tmp")), "never caught the writer mid-write"
            writer.send_signal(signal.SIGKILL)
        finally:
            writer.kill()
            writer.wait()
        snapshot = torch.load(path, weights_only=True)
        assert torch.all(snapshot["payload"] == snapshot["version"].float())
        assert snapshot["payload"].numel() == 3_000_000
