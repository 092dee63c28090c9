"""Tests for data_scripts/make_shards.py: the CSV + images -> tar shards converter — the tests that start processes (the rest: tests/unit/test_make_shards.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import MAKE_SHARDS as SCRIPT
from tests.helpers import load_make_shards


def test_cli_runs_and_checks_its_arguments(tiny_data, tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--csv", str(tiny_data.labels_csv("val")),
                           "--images", str(tiny_data.images_dir("val")), "--out", str(tmp_path),
                           "--shard-size", "100"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "12 samples" in done.stdout and (tmp_path / "shard-000000.tar").is_file()
    with pytest.raises(SystemExit):
        load_make_shards().parse_args(["--csv", "labels.csv"])
