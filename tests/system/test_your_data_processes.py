"""``common.ddp.train`` on your own images under torchrun: 2 processes equal 1 (gloo, CPU).

The in-process twin is ``tests/unit/test_your_data_training.py``; here the ImageFolder is
trained by two ranks and compared with one plain process, weight by weight.
"""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout

import torch

from common.ddp.launch import torchrun_command
from common.ddp.train import main
from common.images.examples import truncated_jpeg
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


def test_a_bad_file_both_ranks_read_ends_the_chapters_launch_in_one_line(tmp_path):
    """The command every chapter launches (``torchrun_command``: ``python -m common.ddp.torchrun``,
    its workers fresh interpreters) ends the job in one line naming the file and the ranks, exit
    status 1: not each rank's line, then torchrun's agent's log line and ChildFailedError traceback."""
    root = write_imagefolder(tmp_path / "pets", train=2, val=1)
    cut = truncated_jpeg(sorted((root / "train").iterdir())[0] / "cut.jpg")
    # The agent forked from tests/system/forked_ranks.py's server (torch imported once); the
    # workers it starts are the learner's, python -m common.ddp.train.
    done = run_forked(torchrun_command("common.ddp.train", ["--tiny", "--data", str(root)]),
                      timeout=180, check=False)
    output = done.stdout + done.stderr
    said = [line for line in output.splitlines() if line and not line.startswith("device plan:")]
    assert done.returncode == 1 and len(said) == 1, output[-3000:]
    assert "Traceback" not in output and "ChildFailedError" not in output, output[-3000:]
    # Both ranks, or the first one: the agent stops the others once one has failed.
    assert re.match(rf"(rank [01]|ranks 0, 1): error: cannot decode image {re.escape(str(cut))}: ",
                    said[0]), said
