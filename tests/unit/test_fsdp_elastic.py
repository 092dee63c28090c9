"""Tests for common/fsdp/elastic.py (the live join and leave run in chapters/06_4, under nbval, and
the leave again in ex06 Exercise 9, graded by tests/system/test_grading_classroom.py; a guest with
other settings, live: tests/system/test_fsdp_train.py)."""

from __future__ import annotations

import json
import sys

from common.fsdp.config import RANK_MAY_DIFFER
from common.fsdp.elastic import agree_on_settings, elastic_command, read_log, settings_disagreement


def test_elastic_command_is_a_c10d_rendezvous_of_one_to_two_agents():
    command = elastic_command("common.fsdp.train", ["--tiny"], endpoint="127.0.0.1:29555")
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert {"--nnodes=1:2", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:29555",
            "--max-restarts=0"} <= set(command)
    assert "--rdzv-conf=last_call_timeout=1,join_timeout=60" in command
    assert command[-3:] == ["-m", "common.fsdp.train", "--tiny"]


def test_elastic_command_runs_a_script_as_its_workers_too(tmp_path):
    """ex06 Exercise 9 stages chapter 6.4's leave with a learner's script, not a module."""
    script = tmp_path / "elastic_train.py"
    command = elastic_command(str(script), ["--steps", "3"], endpoint="127.0.0.1:29555")
    assert "-m" not in command[3:] and command[-3:] == [str(script), "--steps", "3"]


def test_read_log_skips_a_line_still_being_written(tmp_path):
    log = tmp_path / "log.jsonl"
    assert read_log(log) == []
    log.write_text(json.dumps({"event": "start", "world_size": 1}) + '\n{"event": "chec')
    assert read_log(log) == [{"event": "start", "world_size": 1}]


def test_elastic_command_sets_keep_alive_and_host_only_when_given():
    command = elastic_command("common.fsdp.train", endpoint="127.0.0.1:29555", max_restarts=1,
                              keep_alive_interval=1, keep_alive_max_attempt=2, is_host=False)
    assert ("--rdzv-conf=last_call_timeout=1,join_timeout=60,keep_alive_interval=1,"
            "keep_alive_max_attempt=2,is_host=0") in command
    assert "--max-restarts=1" in command


def _member(rank: int, **settings) -> dict:
    base = {"seed": 0, "batch_size": 12, "num_workers": 0, "lr": 0.003}
    return {"settings": {**base, **settings}, "pid": 100 + rank, "host": "node"}


def test_a_rank_with_other_settings_is_named_and_per_rank_flags_may_differ():
    assert settings_disagreement([_member(0), _member(1, num_workers=2)],
                                 may_differ=RANK_MAY_DIFFER) == ""
    found = settings_disagreement([_member(0), _member(1, seed=5, batch_size=24), _member(2)],
                                  may_differ=RANK_MAY_DIFFER)
    assert "rank 1 (pid 101 on node): --batch-size 12 / 24; --seed 0 / 5" in found
    assert "rank 2" not in found and "rank 0 (pid 100 on node)" in found
    assert "only --num-workers, --step-delay, --threads, --tiny may differ" in found


def test_agree_on_settings_in_one_process_has_nobody_to_disagree_with():
    agree_on_settings({"seed": 0}, may_differ=RANK_MAY_DIFFER)  # no process group: [itself]
