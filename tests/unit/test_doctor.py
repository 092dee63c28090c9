"""Tests for common/tools/doctor.py: each faked condition is flagged, with its fix."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

import torch

from common.synthetic import SyntheticConfig, verify
from common.tools.doctor import (
    SHM_MINIMUM,
    Facts,
    check_data,
    check_interpreter,
    check_packages,
    check_shm,
    diagnose,
    gather_facts,
    read_minimums,
    report,
    shm_size,
    suggest_num_workers,
    summary,
    verdict,
)

REPO = Path(__file__).resolve().parents[2]


def healthy(tiny_data, config) -> Facts:
    """Facts of a machine with nothing wrong, independent of the machine running the tests."""
    return Facts(
        python_version=(3, 11, 7), executable=str(REPO / ".venv/bin/python"),
        prefix=str(REPO / ".venv"), conda_prefix=None, repo=REPO, in_kernel=False,
        common_file=str(REPO / "common/__init__.py"),
        packages={"torch": "2.5.0", "torchvision": "0.20.0", "numpy": "2.0.0"},
        minimums={"torch": "2.4", "torchvision": "0.19", "numpy": "1.24"},
        torch_build="CPU only", cuda_available=False, cuda_devices=(), mps_available=False,
        cpu_count=4, usable_cpus=4, start_method="fork", shm_total=8 * 2**30,
        shm_free=8 * 2**30, data_root=tiny_data.root, data_problems=verify(tiny_data.root, config))


def config_of(data) -> SyntheticConfig:
    """The config a dataset was generated with, read back from its manifest."""
    return SyntheticConfig(**json.loads((data.root / "manifest.json").read_text())["config"])


def statuses(facts: Facts) -> dict[str, str]:
    return {check.name: check.status for check in diagnose(facts)}


def test_healthy_facts_give_ready_verdict(tiny_data):
    checks = diagnose(healthy(tiny_data, config_of(tiny_data)))
    assert not [c for c in checks if c.status in ("problem", "warn")], checks
    assert verdict(checks).startswith("VERDICT: READY —")


def test_damaged_data_is_flagged(tiny_data, tmp_path):
    root = tmp_path / "shapes"
    shutil.copytree(tiny_data.root, root)
    victim = sorted((root / "train" / "images").glob("*.jpg"))[0]
    victim.write_bytes(victim.read_bytes()[:50])
    facts = dataclasses.replace(healthy(tiny_data, config_of(tiny_data)), data_root=root,
                                data_problems=verify(root, config_of(tiny_data)))
    check = check_data(facts)
    assert check.status == "problem" and "damaged" in check.detail and victim.name in check.detail
    assert "make data" in check.fix


def test_wrong_venv_is_flagged_with_the_fix(tiny_data, tmp_path):
    other = tmp_path / "other-env"
    facts = dataclasses.replace(healthy(tiny_data, config_of(tiny_data)), prefix=str(other),
                                executable=str(other / "bin/python"))
    check = check_interpreter(facts)
    assert check.status == "problem" and str(other / "bin/python") in check.detail
    assert ".venv/bin/python -m common.tools.doctor" in check.fix
    assert statuses(facts)["interpreter"] == "problem"
    assert "interpreter" in verdict(diagnose(facts))


def test_wrong_kernel_fix_names_the_kernel(tiny_data, tmp_path):
    facts = dataclasses.replace(healthy(tiny_data, config_of(tiny_data)), prefix=str(tmp_path),
                                in_kernel=True)
    check = check_interpreter(facts)
    assert check.status == "problem" and "notebook kernel" in check.detail
    assert "ipykernel install" in check.fix and "make lab" in check.fix


def test_an_activated_conda_env_is_accepted(tiny_data, tmp_path):
    facts = dataclasses.replace(healthy(tiny_data, config_of(tiny_data)), prefix=str(tmp_path),
                                conda_prefix=str(tmp_path))
    assert check_interpreter(facts).status == "info"


def test_small_shm_is_flagged_with_shm_size(tiny_data):
    facts = dataclasses.replace(healthy(tiny_data, config_of(tiny_data)), shm_total=64 * 2**20,
                                shm_free=60 * 2**20)
    check = check_shm(facts)
    assert check.status == "problem" and "64 MiB" in check.detail
    assert "--shm-size" in check.fix
    assert suggest_num_workers(facts) == 0
    assert "fix: in Docker start the container with `--shm-size=2g`" in report(diagnose(facts))
    assert "/dev/shm" in verdict(diagnose(facts))


def test_shm_thresholds_and_absence(tiny_data):
    base = healthy(tiny_data, config_of(tiny_data))
    assert check_shm(dataclasses.replace(base, shm_total=SHM_MINIMUM)).status == "warn"
    assert check_shm(dataclasses.replace(base, shm_total=None, shm_free=None)).status == "info"
    assert suggest_num_workers(dataclasses.replace(base, usable_cpus=2)) == 1
    assert suggest_num_workers(dataclasses.replace(base, usable_cpus=64)) == 8


def test_missing_and_old_packages_are_flagged(tiny_data):
    base = healthy(tiny_data, config_of(tiny_data))
    facts = dataclasses.replace(base, packages={**base.packages, "torch": "2.1.0",
                                                "numpy": None})
    check = check_packages(facts)
    assert check.status == "problem"
    assert "torch 2.1.0 is older than 2.4" in check.detail and "numpy is not installed" in check.detail
    assert "make install" in check.fix


def test_read_minimums(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("# comment\n-r other.txt\ntorch>=2.4\nnumpy >= 1.24  # why\nplain\n")
    assert read_minimums(path, tmp_path / "absent.txt") == {"torch": "2.4", "numpy": "1.24"}


def test_shm_size_matches_disk_usage(tmp_path):
    total, free = shm_size(tmp_path)
    assert total == shutil.disk_usage(tmp_path).total and 0 < free <= total
    assert shm_size(tmp_path / "absent") == (None, None)


def test_gather_facts_describes_this_process(tiny_data):
    facts = gather_facts(tiny_data.root, config_of(tiny_data))
    assert facts.packages["torch"] == metadata.version("torch")
    assert facts.packages["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert facts.cpu_count == os.cpu_count()
    assert facts.cuda_available == torch.cuda.is_available()
    assert facts.python_version == tuple(sys.version_info[:3])
    assert facts.data_problems == []


def test_summary_is_three_lines_versions_device_data(tiny_data):
    facts = healthy(tiny_data, config_of(tiny_data))
    lines = summary(facts).splitlines()
    assert lines[:2] == ["Python 3.11.7 · torch 2.5.0 · torchvision 0.20.0",
                         "device: CPU (no CUDA or MPS device; torch built for CPU only)"]
    assert lines[2].startswith("data: ready") and len(lines) == 3
    gpu = dataclasses.replace(facts, cuda_available=True, cuda_devices=("GPU A", "GPU B"))
    assert summary(gpu).splitlines()[1] == "device: CUDA (GPU A, GPU B)"


def test_summary_says_what_is_wrong_and_where_the_full_report_is(tiny_data, tmp_path):
    base = healthy(tiny_data, config_of(tiny_data))
    no_data = dataclasses.replace(base, data_root=tmp_path, data_problems=["no manifest.json"])
    lines = summary(no_data).splitlines()
    assert len(lines) == 3 and "data: NOT READY" in lines[2] and "make data" in lines[2]
    broken = dataclasses.replace(base, prefix=str(tmp_path),
                                 packages={**base.packages, "torchvision": None})
    lines = summary(broken).splitlines()
    assert "torchvision NOT INSTALLED" in lines[0] and len(lines) == 4
    assert "interpreter" in lines[3] and "packages" in lines[3]
    assert "python -m common.tools.doctor" in lines[3]
