"""The synthetic dataset: layout, determinism, idempotence, damage detection — the tests that start processes (the rest: tests/unit/test_synthetic.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.test_synthetic import REPO


def test_cli_writes_a_dataset(tmp_path):
    root = tmp_path / "cli"
    result = subprocess.run(
        [sys.executable, str(REPO / "data_scripts" / "make_synthetic_data.py"), "--root", str(root),
         "--num-train", "12", "--num-val", "6", "--min-size", "32", "--max-size", "48"],
        capture_output=True, text=True, check=True)
    assert "12 train + 6 val" in result.stdout
    assert len(list((root / "train" / "images").glob("*.jpg"))) == 12
