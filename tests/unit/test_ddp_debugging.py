"""Tests for common/ddp/debugging.py: stack dumps taken in this process, and reading them.

The whole job (a rank that hangs on purpose, found from the dumps) runs in
tests/system/test_ddp_debugging_processes.py.
"""

from __future__ import annotations

import faulthandler
import inspect
import signal
import threading
import time

import pytest

from common.ddp.debugging import (
    Frame,
    arm_stack_dump,
    disarm_stack_dump,
    hung_ranks,
    parse_stack,
    pid_file,
    rank_stacks,
    read_stacks,
    signal_ranks,
    stack_file,
)

#: What two ranks of a hung gloo job dumped (torch 2.14, Python 3.11): rank 0 waits in the
#: all-reduce, rank 1 sleeps in its data loading.
WAITING_RANK = """\
Current thread 0x00007f3834a04b80 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3906 in all_reduce
  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/job/hang.py", line 14 in <module>
"""
STUCK_RANK = """\
Current thread 0x00007f6adb870b80 (most recent call first):
  File "/job/hang.py", line 9 in next_batch
  File "/job/hang.py", line 13 in <module>
"""


def test_a_dump_is_parsed_innermost_first_and_the_waiting_rank_is_told_apart():
    frames = parse_stack(STUCK_RANK)
    assert frames == [Frame("/job/hang.py", 9, "next_batch"), Frame("/job/hang.py", 13, "<module>")]
    states = rank_stacks({0: WAITING_RANK, 1: STUCK_RANK})
    assert states[0].waiting and states[0].at == Frame("/job/hang.py", 14, "<module>")
    assert not states[1].waiting
    assert hung_ranks({0: WAITING_RANK, 1: STUCK_RANK}) == {1: Frame("/job/hang.py", 9, "next_batch")}
    assert hung_ranks({0: WAITING_RANK, 1: WAITING_RANK}) == {}, "a mismatch: everyone waits"


def test_the_last_of_several_dumps_counts_and_an_empty_dump_is_refused_by_rank():
    moved_on = STUCK_RANK.replace("line 9 in next_batch", "line 10 in next_batch")
    assert parse_stack(STUCK_RANK + "\n" + moved_on)[0].line == 10
    with pytest.raises(ValueError, match="rank 3: its stack dump holds no Python frame"):
        rank_stacks({3: "Timeout (0:00:01)!\n"})


def _here() -> int:
    return inspect.currentframe().f_back.f_lineno


def test_a_signal_dumps_this_process_main_thread_among_its_threads(tmp_path):
    ready, stop = threading.Event(), threading.Event()
    helper = threading.Thread(target=lambda: (ready.set(), stop.wait()), daemon=True)
    helper.start()
    ready.wait()
    dump = arm_stack_dump(tmp_path, 0)
    try:
        assert signal_ranks(tmp_path, 1, wait_s=1) == {0: int(pid_file(tmp_path, 0).read_text())}
        line = _here()
        stacks = read_stacks(tmp_path, 1, wait_s=5)
    finally:
        faulthandler.unregister(signal.SIGUSR1)
        dump.close()
        stop.set()
    assert stacks[0].count("(most recent call first)") >= 2, "all threads are dumped"
    name = inspect.currentframe().f_code.co_name
    ours = next(frame for frame in parse_stack(stacks[0]) if frame.function == name)
    assert ours.file == __file__ and line - 2 <= ours.line <= line
    assert hung_ranks(stacks) == {0: parse_stack(stacks[0])[0]}, "not inside torch: not waiting"


def test_the_watchdog_dumps_unless_disarmed(tmp_path):
    dump = arm_stack_dump(tmp_path / "late", 0, after_s=0.05)
    time.sleep(0.5)
    dump.close()
    assert "Timeout (0:00:00.05" in stack_file(tmp_path / "late", 0).read_text()
    dump = arm_stack_dump(tmp_path / "quick", 0, after_s=0.5)
    disarm_stack_dump()
    time.sleep(0.7)
    dump.close()
    faulthandler.unregister(signal.SIGUSR1)
    assert stack_file(tmp_path / "quick", 0).read_text() == ""
    with pytest.raises(ValueError, match="after_s must be a positive"):
        arm_stack_dump(tmp_path, 0, after_s=0)


def test_a_rank_that_never_armed_is_named(tmp_path):
    with pytest.raises(TimeoutError, match=r"rank\(s\) \[1\] wrote no pid file"):
        pid_file(tmp_path, 0).write_text("123\n")
        signal_ranks(tmp_path, 2, wait_s=0.1)
    with pytest.raises(TimeoutError, match=r"rank\(s\) \[0\] wrote no stack dump"):
        read_stacks(tmp_path, 1, wait_s=0.1)
