"""The command-line contract as a user's terminal sees it: a few bad values run as real commands.

The many cases live in tests/unit/test_cli_contract.py (in-process, fast); here each command is a
fresh interpreter, so a traceback printed anywhere on the way (imports, ``__main__``, torch) would
show. Plus ``course.publishing.notebooks``, whose import starts pandoc (jupytext) and so cannot be a unit test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _command(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=180, check=False)


def test_real_commands_refuse_bad_values_in_one_line(tmp_path):
    regular = tmp_path / "file.txt"
    regular.write_text("not a manifest\n")
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    cases = [  # (argv, exit status, named on stderr)
        (["-m", "common.ddp.train", "--tiny", "--lr", "nan"], 2, "--lr"),
        (["-m", "common.shards.train", "--tiny", "--shards", str(regular)], 1, "--shards"),
        (["data_scripts/make_shards.py", "--prefix", "../escaped", "--out", str(tmp_path / "o")],
         2, "--prefix"),
        (["data_scripts/make_synthetic_data.py", "--jpeg-quality", "0"], 2, "--jpeg-quality"),
        (["-m", "course.publishing.translate", "status", "--chapters", str(tmp_path / "none")], 2,
         "--chapters"),
        (["-m", "course.grading", "--submissions", str(tmp_path / "subs"), "--sources",
          str(tmp_path / "empty"), "--out", str(tmp_path / "grades")], 2, "--sources"),
    ]
    for argv, code, named in cases:
        done = _command(*argv)
        assert done.returncode == code, (argv, done.stderr[-2000:])
        assert named in done.stderr and "Traceback" not in done.stderr, (argv, done.stderr)
        assert len(done.stderr.strip().splitlines()[-1]) < 400
    assert not list(tmp_path.glob("escaped*")) and not (tmp_path / "o").exists()
    assert not (tmp_path / "grades").exists()  # nothing graded against no sources


@pytest.mark.parametrize(("argv", "named"), [
    (["check", "{tmp}/missing.ipynb"], "missing.ipynb"),
    (["check", "{tmp}/notes.txt"], "notes.txt"),
    (["check", "chapters/scripts/06_4/toy_agent_with_worker.py"], "toy_agent_with_worker.py"),
    (["build", "--timeout", "0", "chapters/01_pytorch_basics.py"], "--timeout"),
])
def test_course_notebooks_refuses_missing_notebooks_and_bad_timeouts(argv, named, tmp_path,
                                                                     capsys):
    from course.publishing.notebooks import main

    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main([arg.format(tmp=tmp_path) for arg in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and named in err and "Traceback" not in err


def test_a_label_past_num_classes_in_a_worker_is_one_line(tiny_data, tmp_path, capsys):
    """A manifest without class names: labels are checked against --num-classes as they are
    read, in a DataLoader worker here; the worker's traceback must not reach the terminal."""
    from common.shards.format import write_shards
    from common.shards.train import main

    rows = tiny_data.labels_csv("train").read_text().splitlines()[1:]
    samples = [(tiny_data.images_dir("train") / name, int(label))
               for name, label in (row.split(",") for row in rows)]
    write_shards(samples, tmp_path / "bare", shard_size=8)
    assert max(label for _, label in samples) >= 2
    code = main(["--tiny", "--shards", str(tmp_path / "bare"), "--val-shards",
                 str(tmp_path / "bare"), "--num-classes", "2", "--num-workers", "1"])
    err = capsys.readouterr().err
    assert code == 1 and "label" in err and "out of range" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
