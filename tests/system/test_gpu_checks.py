"""tests/gpu/run_gpu_checks.py on a machine without a GPU: the plan, a clean skip, the report."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "gpu" / "run_gpu_checks.py"


def _load():
    spec = importlib.util.spec_from_file_location("run_gpu_checks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_list_prints_every_step_and_the_budget_fits_in_eight_minutes(capsys):
    checks = _load()
    assert checks.main(["--list", "--only", "gpu,bench-ddp"]) == 0
    out = capsys.readouterr().out
    for name, _, _ in checks.PLAN:
        assert out.count(name) >= 1
    assert "bench-fast" in out and "(not selected)" in out
    assert sum(limit for _, limit, _ in checks.PLAN) >= 450, "every step has room in the budget"
    assert "overall budget 450 s" in out, "the default budget leaves time to rerun in 8 minutes"


def test_an_unknown_step_is_refused():
    with pytest.raises(SystemExit):
        _load().main(["--list", "--only", "gpu,nope"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: run the checks")
def test_without_cuda_nothing_runs_and_the_exit_status_says_skipped(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "gpu")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "GPU checks skipped" in done.stdout and not (tmp_path / "gpu").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_failing_step_is_recorded_in_the_report_and_fails_the_run(tmp_path):
    checks = _load()
    assert checks.run_plan(tmp_path, ["gpu"], budget=120) == 1  # no CUDA: the step fails
    report = (tmp_path / "gpu_report.md").read_text()
    assert "| gpu | failed (exit 1) |" in report


def test_the_report_is_one_table_of_figures():
    checks = _load()
    results = {"gpu": {"gpu": "NVIDIA H200", "count": 1, "memory_gib": 139.8, "torch": "2.8",
                       "cuda": "12.8", "bf16": True},
               "bench-fast": {"pipelines": [{"pipeline": "guide", "num_workers": 0,
                                             "images_per_s": 812.4, "speedup_vs_guide": 1.0}]},
               "bench-ddp": {"setups": [{"setup": "1 rank", "samples_per_s": 2100.0,
                                         "data_wait_fraction": 0.31}]}}
    text = checks.report(results, [("gpu", "ok", 2.0), ("nb-04_1", "timed out after 180 s", 180)])
    assert "| GPU | 1 x NVIDIA H200 (139.8 GiB)" in text
    assert "| images/s: guide, 0 workers | 812 (1.0x the guide) |" in text
    assert "| DDP samples/s: 1 rank | 2,100.0 (data-wait fraction 0.31) |" in text
    assert "| nb-04_1 | timed out after 180 s | 180 |" in text
