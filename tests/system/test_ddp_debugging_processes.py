"""Uneven inputs and a hung rank on 2 gloo processes: common/ddp/uneven.py on 2 forked ranks, and
common/ddp/debugging.py finding a rank that hangs on purpose (the rest: tests/unit/
test_ddp_uneven.py, test_ddp_debugging.py)."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from common.ddp.debugging import hung_ranks, rank_stacks, read_stacks, signal_ranks
from tests.system.forked_ranks import forked_ranks_command, popen, run_forked

#: A job whose rank 1 never reaches the all-reduce its rank 0 waits in.
HUNG_JOB = """\
    import sys, time
    from pathlib import Path
    import torch, torch.distributed as dist
    from common.ddp.debugging import arm_stack_dump

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dump = arm_stack_dump(Path(sys.argv[1]), rank)
    if rank == 1:
        time.sleep(120)  # HANGS HERE
    dist.all_reduce(torch.ones(2))
"""


@pytest.mark.slow
def test_join_finishes_uneven_inputs_that_plain_ddp_leaves_waiting(tmp_path):
    out = tmp_path / "uneven.json"
    # Two ranks forked from one interpreter (tests/system/forked_ranks.py): the subject is Join.
    run_forked(forked_ranks_command("common.ddp.uneven", ["--batches", "2", "4", "--timeout", "1",
                                                          "--out", str(out)]), timeout=180)
    rows = {(row["join"], row["rank"]): row for row in json.loads(out.read_text())}
    assert rows[False, 0]["error"] is None and rows[False, 0]["steps"] == 2
    assert "Timed out" in rows[False, 1]["error"] and rows[False, 1]["steps"] == 2
    for rank, batches in ((0, 2), (1, 4)):
        row = rows[True, rank]
        assert row["error"] is None and row["steps"] == batches
        assert row["equal_on_all_ranks"] and row["equal_to_reference"], row


def _stacks_of_a_waiting_job(folder, world_size: int, wait_s: float = 60) -> dict[int, str]:
    """Signal every rank until rank 0's dump shows it inside the all-reduce (it may be a
    moment away from it when the pid files appear)."""
    deadline = time.monotonic() + wait_s
    while True:
        signal_ranks(folder, world_size, wait_s=wait_s)
        time.sleep(0.3)
        stacks = read_stacks(folder, world_size)
        if rank_stacks(stacks)[0].waiting or time.monotonic() > deadline:
            return stacks


@pytest.mark.slow
def test_the_rank_that_hangs_is_found_from_the_stack_dumps_of_all_ranks(tmp_path):
    script = tmp_path / "hung.py"
    script.write_text(textwrap.dedent(HUNG_JOB))
    # Two ranks forked from one interpreter, each running the script as `python hung.py` would.
    job = popen(forked_ranks_command(str(script), [str(tmp_path / "stacks")]))
    try:
        stacks = _stacks_of_a_waiting_job(tmp_path / "stacks", 2)
    finally:
        job.kill()  # the job and both ranks
        job.wait(timeout=30)
    (frame,) = hung_ranks(stacks).values()
    assert list(hung_ranks(stacks)) == [1]
    assert frame.file == str(script) and script.read_text().splitlines()[frame.line - 1].endswith(
        "# HANGS HERE")
    assert rank_stacks(stacks)[0].waiting
