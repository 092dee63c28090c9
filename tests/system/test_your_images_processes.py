"""The command lines for your own images, run as a learner runs them: ``python -m common.images.check``,
``python -m common.images.split`` and ``python -m common.shards.make --imagefolder`` on a messy folder
(``tests/unit/your_images.py``): exit statuses, one line per refusal, argparse errors on bad flags."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit.your_images import truncated_jpeg, write_messy_folder


def _run(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def messy(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos") / "photos"
    write_messy_folder(root)
    return root


def test_check_split_and_shards_on_a_messy_folder(messy, tmp_path):
    done = _run("common.images.check", str(messy))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].split() == ["split", "class", "images", "width", "x",
                                                   "height", "modes", "formats"]
    assert "ok: 60 images in 3 classes" in done.stdout
    split = _run("common.images.split", str(messy / "train"), "--out", str(tmp_path / "split"),
                 "--val-fraction", "0.25", "--seed", "1")
    assert split.returncode == 0, split.stderr
    assert split.stdout.splitlines()[-1] == f"{tmp_path / 'split'}: 24 training and 9 validation images"
    shards = _run("common.shards.make", "--imagefolder", str(tmp_path / "split"), "--out",
                  str(tmp_path / "shards"))
    assert shards.returncode == 0, shards.stderr
    assert "24 samples" in shards.stdout and "9 samples" in shards.stdout


def test_a_problem_is_one_line_per_file_and_exit_status_1(messy, tmp_path):
    import shutil

    root = shutil.copytree(messy, tmp_path / "photos", symlinks=True)
    cut = truncated_jpeg(root / "train" / "dog" / "cut.jpg")
    os.mkfifo(root / "train" / "dog" / "pipe.jpg")
    done = _run("common.images.check", str(root))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    problems = [line for line in done.stdout.splitlines() if line.startswith("problem:")]
    assert len(problems) == 2, done.stdout
    assert any(str(cut) in line and "truncated" in line for line in problems)
    made = _run("common.shards.make", "--imagefolder", str(root), "--out", str(tmp_path / "s"))
    assert made.returncode == 1 and "Traceback" not in made.stderr
    assert "pipe.jpg: a FIFO, not a regular file" in made.stderr


@pytest.mark.parametrize("args, flag", [
    (["--val-fraction", "1.5"], "--val-fraction"), (["--mode", "move"], "--mode"),
    ([], "--out"), (["--csv", "x.csv"], "--csv")])
def test_split_refuses_bad_flags_naming_them(messy, tmp_path, args, flag):
    source = [] if "--csv" in args else [str(messy / "train")]
    out = [] if flag == "--out" else ["--out", str(tmp_path / "o")]
    done = _run("common.images.split", *source, *out, *args)
    assert done.returncode == 2 and flag in done.stderr.splitlines()[-1], done.stderr


def test_check_refuses_a_missing_folder(tmp_path):
    done = _run("common.images.check", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "does not exist" in done.stderr.splitlines()[-1]
