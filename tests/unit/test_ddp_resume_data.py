"""The DDP trainer's resume contract on data: a ``--snapshot`` resumes only on the
data it was written on, as ``common.fsdp.train`` and ``common.shards.train`` already refuse.

In this process (world size 1, no process group): a run of 24 images stopped after one step,
then resumed on other data of the same size. Nothing may be loaded: the snapshot stays as it was.
"""

from __future__ import annotations

import io
import shutil
from contextlib import redirect_stdout
from dataclasses import asdict

import pytest

from common.ddp.train import main
from common.synthetic import SyntheticConfig, ensure_data

DATA = SyntheticConfig(seed=7, num_train=24, num_val=12, min_size=40, max_size=64)
OTHER = SyntheticConfig(**{**asdict(DATA), "seed": 8})  # the same size, other images and labels


def _main(data_root, snapshot, *extra: str) -> int:
    argv = ["--tiny", "--subset", "24", "--data", str(data_root), "--snapshot", str(snapshot),
            *extra]
    with redirect_stdout(io.StringIO()):
        return main(argv)


@pytest.fixture
def stopped(tmp_path):
    """(data folder, snapshot, its bytes) of a run stopped after one optimizer step."""
    data = ensure_data(tmp_path / "shapes", DATA, verbose=False)
    snapshot = tmp_path / "snap.pt"
    assert _main(data.root, snapshot, "--max-steps", "1") == 0
    return data.root, snapshot, snapshot.read_bytes()


def test_another_data_folder_of_the_same_size_is_refused_naming_it(stopped, tmp_path, capsys):
    mine, snapshot, good = stopped
    other = ensure_data(tmp_path / "other", OTHER, verbose=False).root
    capsys.readouterr()
    assert _main(other, snapshot) == 2
    assert f"--data '{mine}' -> '{other}'" in capsys.readouterr().err
    assert snapshot.read_bytes() == good


def test_data_regenerated_in_place_is_refused_naming_the_file(stopped, capsys):
    mine, snapshot, good = stopped
    shutil.rmtree(mine)
    ensure_data(mine, OTHER, verbose=False)  # same folder, same size, other labels
    capsys.readouterr()
    code = _main(mine, snapshot)
    err = capsys.readouterr().err
    assert snapshot.read_bytes() == good
    assert code == 2, err
    assert "was written by a run on other data (snapshot -> now): --data train/labels.csv sha256" \
        in err
