"""CI: the workflow's jobs (.github/workflows/ci.yml), .ci/run, and the pinned versions (constraints.txt)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
JOBS = WORKFLOW["jobs"]
_spec = importlib.util.spec_from_file_location("ci_constraints", REPO / ".ci" / "constraints.py")
constraints = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(constraints)


def _runs(job: str) -> str:
    return "\n".join(step.get("run", "") for step in JOBS[job]["steps"])


def test_pushes_get_make_check_first_then_the_full_run_as_root_pinned():
    triggers = WORKFLOW.get("on", WORKFLOW.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request", "schedule"} <= set(triggers)
    assert "make check" in _runs("check") and ".ci/run" not in _runs("check")
    assert JOBS["test"]["needs"] == "check", "the full run waits for the quick signal"
    assert 'sudo -E env "PATH=$PATH" bash .ci/run' in _runs("test"), "root-only tests (Slurm) run as root"
    assert "kernel.apparmor_restrict_unprivileged_userns=0" in _runs("test"), "bubblewrap on Ubuntu 24.04"
    assert WORKFLOW["env"]["TORCH_INDEX"] == "cpu", "no 5 GB CUDA build on a GPU-less runner"
    for job in ("check", "test"):
        assert JOBS[job]["env"]["CONSTRAINTS"] == "constraints.txt"
        assert JOBS[job]["runs-on"] == "ubuntu-24.04", "the AppArmor setting is for this release"
        (cache,) = [step for step in JOBS[job]["steps"] if step.get("uses", "").startswith("actions/cache@")]
        for name in ("requirements.txt", "requirements-dev.txt", "pyproject.toml", "constraints.txt"):
            assert f"'{name}'" in cache["with"]["key"], "the pip cache is keyed on the requirement files"


def test_the_weekly_job_runs_the_newest_releases_and_reports_what_broke():
    newest = JOBS["newest"]
    assert "schedule" in newest["if"] and "push" not in newest["if"]
    assert "schedule" not in JOBS["check"]["if"], "so `test`, which needs `check`, does not run weekly either"
    assert 'CONSTRAINTS= bash .ci/run' in _runs("newest"), "no constraints: the newest releases"
    assert ".ci/constraints.py --compare constraints.txt" in _runs("newest"), "which versions changed"
    assert "^(FAILED|ERROR) " in _runs("newest") and "gh issue create" in _runs("newest")
    assert newest["permissions"]["issues"] == "write"


def test_ci_run_needs_its_system_parts_and_installs_the_pinned_versions():
    run = (REPO / ".ci" / "run").read_text()
    assert "set -euo pipefail" in run
    assert "make system-deps ||" not in run, "a failed make system-deps fails CI (no warning and go on)"
    assert 'export CONSTRAINTS="${CONSTRAINTS-constraints.txt}"' in run
    assert run.index("make system-deps") < run.rindex("make test")


def test_constraints_pin_every_requirement_exactly_within_its_range():
    pins = constraints.pinned(REPO / "constraints.txt")
    assert "torch-pipelines-companion" not in pins and "pip" not in pins, "not the project, not pip"
    for requirement in constraints.root_requirements(REPO / "requirements-dev.txt"):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name}: no pin in constraints.txt (make constraints)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name])
    text = (REPO / "constraints.txt").read_text()
    assert all(re.fullmatch(r"[a-z0-9-]+==\S+", line) for line in text.splitlines() if not line.startswith("#"))
    # torch and torchvision: the versions that resolve on this project's machines, never newer
    assert Version(pins["torch"]) <= Version("2.14.1") and Version(pins["torchvision"]) <= Version("0.29.1")


def test_the_makefile_installs_with_constraints_only_when_asked():
    makefile = (REPO / "Makefile").read_text()
    assert "CONSTRAINTS ?=\n" in makefile, "empty by default: `make lab` and `make test` need no constraints"
    assert "$(if $(CONSTRAINTS),-c $(CONSTRAINTS))" in makefile
    assert re.search(r"^constraints: .*\n\t\$\(BIN\)/python \.ci/constraints\.py > ", makefile, re.M)


def test_root_requirements_follow_includes_and_skip_comments(tmp_path):
    (tmp_path / "base.txt").write_text("# runtime\nnumpy>=1.24  # arrays\n")
    (tmp_path / "dev.txt").write_text("-r base.txt\n\npytest>=8.0\n-e .\n")
    assert [str(r) for r in constraints.root_requirements(tmp_path / "dev.txt")] == ["numpy>=1.24", "pytest>=8.0"]


def test_closure_follows_installed_requirements_and_their_extras():
    found = constraints.closure([Requirement("nbval>=0.11")])
    assert {"nbval", "pytest", "ipykernel", "nbformat"} <= set(found), sorted(found)
    assert found["nbval"] == importlib.metadata.version("nbval")
    assert "torch-pipelines-companion" not in constraints.closure([Requirement("torch-pipelines-companion[shards]")])
    assert "webdataset" in constraints.closure([Requirement("torch-pipelines-companion[shards]")])


def test_the_weekly_report_lists_each_changed_version(tmp_path):
    pinned = tmp_path / "constraints.txt"
    pinned.write_text("# header\nNumPy==2.0.0\ntorch==2.14.1\ngone==1.0\n")
    assert constraints.pinned(pinned) == {"numpy": "2.0.0", "torch": "2.14.1", "gone": "1.0"}
    rows = constraints.changes(constraints.pinned(pinned), {"numpy": "2.1.0", "torch": "2.14.1", "new": "0.1"})
    assert rows == ["| gone | 1.0 | — |", "| new | — | 0.1 |", "| numpy | 2.0.0 | 2.1.0 |"]
