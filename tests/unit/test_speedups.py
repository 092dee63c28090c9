"""tests/speedups: the forking agent some system tests launch, and that nothing learners read uses it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from common.ddp.launch import torchrun_command
from tests.speedups import agent


def test_forking_command_is_torchruns_own_fork_flags_with_this_agent():
    forked = agent.forking_command("common.ddp.train", ["--a", "1"], max_restarts=1)
    assert forked[1:6] == ["-m", "tests.speedups.agent", "--nproc-per-node=2", "--standalone", "--max-restarts=1"]
    assert forked[6:8] == ["--start-method=fork", "--run-path"] and forked[-2:] == ["--a", "1"]
    assert Path(forked[8]).is_absolute() and forked[8].endswith(str(Path("common", "ddp", "train.py")))
    plain = torchrun_command("common.ddp.train", ["--a", "1"], max_restarts=1)
    assert plain[1:3] == ["-m", "common.ddp.torchrun"] and "--run-path" not in plain, "the learner's launch"
    with pytest.raises(ValueError, match="no_such_module is not a module"):
        agent.forking_command("no_such_module")


def test_a_script_is_forked_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    forked = agent.forking_command("job.py", ["--steps", "3"], nproc_per_node=1)
    assert forked[-5:] == ["--start-method=fork", "--run-path", str(tmp_path / "job.py"), "--steps", "3"]


def test_the_agent_imports_the_workers_libraries_then_runs_the_learner_s_torchrun_on_the_same_args(
        monkeypatch):
    from common.ddp import torchrun

    calls = []
    monkeypatch.setattr(agent.importlib, "import_module", lambda name: calls.append(("import", name)))
    monkeypatch.setattr(torchrun, "main", lambda args=None: calls.append(("torchrun", args)) or 7)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert agent.main(("--standalone", "--start-method=fork", "--run-path", "/runs/06_1/train.py",
                       "--tiny")) == 7, "the launcher's exit status"
    assert calls == [*(("import", name) for name in agent.PRELOAD),
                     ("torchrun", ["--standalone", "--start-method=fork", "--run-path", "/runs/06_1/train.py",
                                   "--tiny"])]
    assert "torchvision.transforms.v2" in agent.PRELOAD and "pandas" in agent.PRELOAD
    assert sys.path[0] == "/runs/06_1", "a forked worker imports what lies beside its script, as `python script.py`"


def test_the_agent_leaves_sys_path_alone_without_run_path(monkeypatch):
    before = list(sys.path)
    monkeypatch.setattr(sys, "path", list(before))
    # --run-path here is the script's own argument (after the module), not torchrun's flag
    agent.script_folder_first(["--standalone", "--nproc-per-node=2", "-m", "common.x", "--run-path", "/elsewhere/x.py"])
    assert sys.path == before


def test_any_torchrun_command_of_a_target_gets_forked_workers_and_keeps_its_options():
    from common.fsdp.elastic import elastic_command

    command = elastic_command("common.fsdp.train", ["--tiny"], endpoint="node0:29500", is_host=True)
    forked = agent.forked_workers(command, "common.fsdp.train", ["--tiny"])
    assert forked[:3] == [sys.executable, "-m", "tests.speedups.agent"] and forked[3:-4] == command[3:-3]
    assert forked[-4:-2] == ["--start-method=fork", "--run-path"] and forked[-1] == "--tiny"
    with pytest.raises(ValueError, match="not a torchrun command line of common.ddp.train"):
        agent.forked_workers(command, "common.ddp.train", ["--tiny"])
