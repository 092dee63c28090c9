"""common/ddp/torchrun.py and common.cli.error_line: a failed torchrun job in one line per cause
(in-process; the launch itself: tests/system/test_your_data_processes.py)."""

from __future__ import annotations

import json
import logging
import os
from types import SimpleNamespace

from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from common.cli import LAUNCHER_PRINTS_ERRORS, error_line, fail
from common.ddp import torchrun
from common.ddp.torchrun import failure_lines

BAD = "error: cannot decode image photos/train/dog/cut.jpg: image file is truncated"


def test_a_rank_hands_its_line_to_the_launcher_in_torchelastic_s_error_file(tmp_path, monkeypatch,
                                                                            capsys):
    error_file = tmp_path / "attempt_0" / "1" / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    monkeypatch.setenv(LAUNCHER_PRINTS_ERRORS, "1")
    error_line(f"rank 1: {BAD}")
    assert capsys.readouterr().err == ""
    # torchrun's agent reads it back as the failure's message
    failure = ProcessFailure(local_rank=1, pid=7, exitcode=2, error_file=str(error_file))
    assert failure.message == f"rank 1: {BAD}"
    assert json.loads(error_file.read_text())["message"] == f"rank 1: {BAD}"


def test_without_the_launcher_a_rank_prints_its_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "error.json"))  # plain torchrun
    monkeypatch.delenv(LAUNCHER_PRINTS_ERRORS, raising=False)
    assert fail("bad.jpg: truncated", prog="common.shards.train") == 1
    assert capsys.readouterr().err == "common.shards.train: error: bad.jpg: truncated\n"
    assert not (tmp_path / "error.json").exists()


def _failure(exitcode: int, message: str | None = None, signal: str = "") -> SimpleNamespace:
    data = {"message": message} if message is not None else {"message": "<NONE>"}
    return SimpleNamespace(exitcode=exitcode, error_file_data=data,
                           message=signal or "To enable traceback see: ...")


def test_ranks_that_say_the_same_are_one_line_naming_them():
    assert failure_lines({1: _failure(2, f"rank 1: {BAD}"), 0: _failure(2, f"rank 0: {BAD}")}) \
        == [f"ranks 0, 1: {BAD}"]


def test_a_rank_stopped_by_its_peer_is_left_out_when_another_says_why():
    stopped = "rank 0: stopped: another rank of the job failed first (its error says why)"
    assert failure_lines({0: _failure(2, stopped), 1: _failure(2, f"rank 1: {BAD}")}) \
        == [f"rank 1: {BAD}"]
    assert failure_lines({0: _failure(2, stopped)}) == [stopped]


def test_a_crash_or_a_signal_without_a_line_gets_its_exit_code_or_signal():
    lines = failure_lines({0: _failure(1), 1: _failure(-9, signal="Signal 9 (SIGKILL) received "
                                                                  "by PID 12")})
    assert lines == ["rank 0: exited with code 1 (its output above says why)",
                     "rank 1: stopped by Signal 9 (SIGKILL) received by PID 12"]


def _said(message: str, *args) -> logging.LogRecord:
    return logging.LogRecord(torchrun.AGENT_LOGGER, logging.ERROR, "api.py", 1, message, args, None)


def test_the_agent_s_report_of_the_last_failure_is_left_out_and_a_restarted_one_kept():
    """With ``--max-restarts=1`` the first failure is restarted from (torchrun reports it, as a job
    that succeeds after it would show); the second ends the job: its report is the lines above."""
    report = [_said("Sending process %s closing signal %s", 12, "SIGTERM"),
              _said("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s", -9, 1, 13, "py")]
    other = _said("Unable to shutdown process %s via %s, forcefully exiting via %s", 12, "SIGTERM", "SIGKILL")
    restarted = torchrun.FinalFailureLeftOut(max_restarts=1)
    assert [restarted.filter(record) for record in [*report, *report, other]] == [True, True, False, False, True]
    assert [torchrun.FinalFailureLeftOut(0).filter(record) for record in report] == [False, False]


def test_the_launcher_sets_a_store_per_attempt_before_its_agent_runs_only_with_restarts(monkeypatch):
    """torchrun's rendezvous reads TORCH_DISABLE_SHARE_RDZV_TCP_STORE in the agent's own process,
    so it must be in this process's environment when ``run`` is called (the ranks inherit it)."""
    seen = []
    monkeypatch.setattr("torch.distributed.run.run",
                        lambda args: seen.append(os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE")))
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "")  # so that the end of the test removes
    monkeypatch.delenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE")        # what the launcher sets
    monkeypatch.delenv("COMPANION_LAUNCH_STARTER", raising=False)
    script = ["--standalone", "--nproc-per-node=2", "train.py"]
    assert torchrun.main(script) == 0 and seen == [None]
    assert torchrun.main(["--max-restarts=1", *script]) == 0 and seen == [None, "1"]
