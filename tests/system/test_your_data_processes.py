"""``common.ddp.train`` on your own images under torchrun: 2 processes equal 1 (gloo, CPU).

The in-process twin is ``tests/unit/test_your_data_training.py``; here the ImageFolder is
trained by two ranks and compared with one plain process, weight by weight.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stdout

import torch

from common.ddp.launch import launch_env
from common.ddp.train import main
from common.images.examples import truncated_jpeg
from tests.speedups.agent import forking_command
from tests.system.forked_ranks import forked_ranks_command, run_forked
from tests.unit.your_images import write_imagefolder

RTOL, ATOL = 1.3e-6, 1e-5  # float32 tolerances of PyTorch's own DDP tests (test_ddp_train.py)


def _argv(root, out) -> list[str]:
    return ["--tiny", "--data", str(root), "--log-file", str(out / "log.jsonl"),
            "--save-final", str(out / "final.pt")]


def _done(out) -> dict:
    lines = (out / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == "done"][-1]


def test_two_ranks_on_an_imagefolder_equal_one_process(tmp_path):
    root = write_imagefolder(tmp_path / "pets", train=8, val=3)  # 24 and 9 images: 3 steps
    one, two = tmp_path / "one", tmp_path / "two"
    with redirect_stdout(io.StringIO()):
        assert main(_argv(root, one)) == 0
    run_forked(forked_ranks_command("common.ddp.train", _argv(root, two), nproc=2), timeout=120)
    assert (_done(two)["world_size"], _done(two)["step"]) == (2, _done(one)["step"]) == (2, 6)
    expected = torch.load(one / "final.pt", weights_only=True)
    got = torch.load(two / "final.pt", weights_only=True)
    assert got.keys() == expected.keys() and expected["classifier.weight"].shape[0] == 3
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=RTOL, atol=ATOL, msg=key)


def test_a_bad_file_both_ranks_read_is_one_line_under_common_ddp_torchrun(tmp_path):
    """Plain torchrun adds its agent's ChildFailedError traceback to the ranks' lines; the
    course's launcher ends the job in one line naming the file and the ranks, exit status 1."""
    root = write_imagefolder(tmp_path / "pets", train=2, val=1)
    cut = truncated_jpeg(sorted((root / "train").iterdir())[0] / "cut.jpg")
    # The launcher run as tests/speedups/agent.py runs torchrun: libraries imported once, the
    # ranks forked from it (--start-method=fork --run-path), to keep the test cheap.
    argv = forking_command("common.ddp.train", ["--tiny", "--data", str(root)])[3:]
    preloaded = ("import sys; from tests.speedups.agent import preload_libraries; "
                 "preload_libraries(); from common.ddp.torchrun import main; "
                 "raise SystemExit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", preloaded, *argv], capture_output=True,
                          text=True, env=launch_env(), timeout=180, check=False)
    said = [line for line in done.stderr.splitlines() if not line.startswith("device plan:")]
    assert done.returncode == 1 and len(said) == 1, done.stderr
    # Both ranks, or the first one: the agent stops the others once one has failed.
    assert re.match(rf"(rank [01]|ranks 0, 1): error: cannot decode image {re.escape(str(cut))}: ",
                    said[0]), said
