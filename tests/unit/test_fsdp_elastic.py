"""Tests for common/fsdp/elastic.py (the live join and leave run in chapters/06_4, under nbval)."""

from __future__ import annotations

import json
import sys

from common.fsdp.elastic import elastic_command, read_log


def test_elastic_command_is_a_c10d_rendezvous_of_one_to_two_agents():
    command = elastic_command("common.fsdp.train", ["--tiny"], endpoint="127.0.0.1:29555")
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert {"--nnodes=1:2", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:29555",
            "--max-restarts=0"} <= set(command)
    assert "--rdzv-conf=last_call_timeout=1,join_timeout=60" in command
    assert command[-3:] == ["-m", "common.fsdp.train", "--tiny"]


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
