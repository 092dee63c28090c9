"""common.fast.benchmark: the quick mode writes a well-formed CSV and chart and prints the table — the tests that start processes (the rest: tests/unit/test_benchmark.py)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import matplotlib.image
import pandas as pd
import pytest

from common.fast.benchmark import GUIDE, LIMIT
from common.fast.timing import COLUMNS


@pytest.mark.slow
def test_quick_mode_writes_csv_chart_and_table(tmp_path):
    out = tmp_path / "bench"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-m", "common.fast.benchmark", "--quick", "--out",
                          str(out)], capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    table = pd.read_csv(out / "benchmark.csv")
    assert list(table.columns) == COLUMNS
    formulations = {"pil_draft_uint8", "torchvision_uint8", "cache_batched"}
    expected = {(GUIDE, 0), (GUIDE, 1), (LIMIT, 0), ("cache_fused", 0)} | {
        (f, w) for f in formulations for w in (0, 1)}
    assert set(zip(table["pipeline"], table["num_workers"], strict=True)) == expected
    assert len(table) == len(expected)
    assert all(math.isfinite(v) and v > 0 for v in table["images_per_s"])
    guide = table.query("pipeline == @GUIDE and num_workers == 0")["images_per_s"].iloc[0]
    assert table["speedup_vs_guide"].tolist() == pytest.approx(
        (table["images_per_s"] / guide).tolist(), rel=0.01, abs=0.006)  # the CSV rounds to 2 decimals: 0.43 may be 0.4254
    chart = matplotlib.image.imread(out / "benchmark.png")
    assert chart.ndim == 3 and chart.shape[0] > 100 and chart.shape[1] > 100
    assert "images_per_s" in run.stdout and "speedup_vs_guide" in run.stdout
    assert "best:" in run.stdout and "pays off after" in run.stdout
    assert (table["peak_pss_mb"] > 0).all()
    cache = pd.read_csv(out / "cache.csv").iloc[0]
    assert cache["build_s"] > 0 and 0 <= cache["open_s"] < 5 and cache["break_even_epochs"] > 0
