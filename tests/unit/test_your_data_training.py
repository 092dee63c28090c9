"""Every trainer on your own images, in this process (world size 1, no torchrun).

``common.ddp.train``, ``common.fsdp.train`` and ``common.shards.train`` on real image files in
both layouts (``tests/unit/your_images.py``), with ``small_cnn`` and a torchvision ``resnet18``
at 32x32 for one step; the uint8 cache on an ImageFolder; shards made with
``make_shards.py --imagefolder``; and every trainer refusing a resume on other classes.
"""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout

import pytest
import torch

from common.ddp.snapshot import read_snapshot
from common.ddp.train import main as ddp_main
from common.fsdp.train import main as fsdp_main
from common.shards import train as shard_train
from common.shards.make import main as make_shards
from tests.unit.your_images import CLASSES, csv_flags, write_csv_layout, write_imagefolder


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    return write_imagefolder(tmp_path_factory.mktemp("your_data") / "pets")


def _run(main, argv: list[str]) -> int:
    with redirect_stdout(io.StringIO()):  # the JSON lines go to the log file as well
        return main(argv)


def _records(log, event: str) -> list[dict]:
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["event"] == event]


def _ddp(data_flags: list[str], out, *extra: str) -> int:
    return _run(ddp_main, ["--tiny", *data_flags, "--max-steps", "1", "--log-file",
                           str(out / "log.jsonl"), "--save-final", str(out / "final.pt"), *extra])


def test_ddp_trains_small_cnn_on_an_imagefolder(pets, tmp_path):
    assert _ddp(["--data", str(pets)], tmp_path) == 0
    start = _records(tmp_path / "log.jsonl", "start")[0]
    assert (start["layout"], start["classes"]) == ("imagefolder", list(CLASSES))
    assert _records(tmp_path / "log.jsonl", "epoch")[0]["val_count"] == 6
    final = torch.load(tmp_path / "final.pt", weights_only=True)
    assert final["classifier.weight"].shape[0] == 3


def test_ddp_trains_resnet18_on_the_guide_s_csvs(tmp_path):
    guide = write_csv_layout(tmp_path / "guide")
    assert _ddp(csv_flags(guide), tmp_path, "--model", "resnet18", "--norm", "batch") == 0
    assert _records(tmp_path / "log.jsonl", "done")[0]["step"] == 1
    final = torch.load(tmp_path / "final.pt", weights_only=True)
    assert final["fc.weight"].shape == (3, 512) and "bn1.running_mean" in final


def test_fsdp_trains_resnet18_with_groupnorm_and_starts_from_weights(pets, tmp_path):
    argv = ["--tiny", "--data", str(pets), "--max-steps", "1", "--log-file",
            str(tmp_path / "log.jsonl")]
    assert _run(fsdp_main, [*argv, "--model", "resnet18", "--save-final",
                            str(tmp_path / "resnet.pt")]) == 0
    final = torch.load(tmp_path / "resnet.pt", weights_only=True)
    assert final["fc.weight"].shape == (3, 512) and not any("running" in k for k in final)
    assert _ddp(["--data", str(pets)], tmp_path / "ddp") == 0  # SmallCNN, GroupNorm, width 4
    assert _run(fsdp_main, [*argv, "--weights", str(tmp_path / "ddp" / "final.pt")]) == 0


def test_a_weights_file_of_another_model_is_one_line_naming_the_keys(pets, tmp_path, capsys):
    torch.save({"fc.weight": torch.zeros(3, 512)}, tmp_path / "other.pt")
    assert _ddp(["--data", str(pets)], tmp_path, "--weights", str(tmp_path / "other.pt")) == 2
    err = capsys.readouterr().err
    assert "does not fit this SmallCNN: missing classifier.bias" in err
    assert "unexpected fc.weight" in err and "Traceback" not in err


def test_an_unreadable_image_stops_training_naming_the_file(pets, tmp_path, capsys):
    root = shutil.copytree(pets, tmp_path / "pets")
    for path in (root / "train").rglob("img_*"):
        path.write_bytes(b"truncated")
    assert _ddp(["--data", str(root)], tmp_path) == 2
    err = capsys.readouterr().err
    assert f"{root / 'train'}" in err and "not an image" in err and "Traceback" not in err


def test_the_cache_pipeline_caches_an_imagefolder_beside_it(pets, tmp_path):
    root = shutil.copytree(pets, tmp_path / "pets")
    assert _ddp(["--data", str(root)], tmp_path, "--data-pipeline", "cache", "--no-augment") == 0
    manifest = json.loads((tmp_path / "cache" / "pets-imagefolder" / "train_32" /
                           "manifest.json").read_text())
    assert manifest["source"]["annotations_file"] == str(root / "train")
    assert manifest["shape"] == [12, 3, 32, 32]


def test_a_ddp_snapshot_refuses_a_resume_on_other_classes(pets, tmp_path, capsys):
    root = shutil.copytree(pets, tmp_path / "pets")
    snapshot = ["--snapshot", str(tmp_path / "snap.pt")]
    assert _ddp(["--data", str(root)], tmp_path, *snapshot) == 0
    assert read_snapshot(tmp_path / "snap.pt")["identity"]["classes"] == "cat, dog, fish"
    for split in ("train", "val"):
        (root / split / "fish").rename(root / split / "frog")
    assert _ddp(["--data", str(root)], tmp_path, *snapshot, "--max-steps", "2") == 2
    err = capsys.readouterr().err
    assert "written by a run on other data (snapshot -> now)" in err
    assert "classes 'cat, dog, fish' -> 'cat, dog, frog'" in err and "--data train/" in err


def test_a_dcp_checkpoint_refuses_a_resume_on_other_classes(pets, tmp_path, capsys):
    root = shutil.copytree(pets, tmp_path / "pets")
    argv = ["--tiny", "--data", str(root), "--checkpoint", str(tmp_path / "ckpt")]
    assert _run(fsdp_main, [*argv, "--max-steps", "1"]) == 0
    shutil.rmtree(root / "val" / "dog")
    shutil.move(root / "train" / "dog", root / "train" / "emu")
    assert _run(fsdp_main, argv) == 2
    err = capsys.readouterr().err
    assert "classes 'cat, dog, fish' -> 'cat, emu, fish'" in err and "(file list)" in err


def test_shards_made_from_an_imagefolder_train_and_record_their_classes(pets, tmp_path, capsys):
    out = tmp_path / "shards"
    assert make_shards(["--imagefolder", str(pets), "--out", str(out), "--shard-size", "5"]) == 0
    manifest = json.loads((out / "val" / "manifest.json").read_text())
    assert manifest["classes"] == list(CLASSES) and manifest["num_samples"] == 6
    argv = ["--tiny", "--shards", str(out / "train"), "--val-shards", str(out / "val"),
            "--num-epochs", "1", "--snapshot", str(tmp_path / "snap.pt")]
    history = shard_train.train(shard_train.parse_args(argv))
    assert sum(history[0]["samples_per_rank"]) == 12
    saved = read_snapshot(tmp_path / "snap.pt")
    assert saved["identity"]["classes"] == "cat, dog, fish"
    assert saved["model"]["classifier.weight"].shape[0] == 3  # the manifest's 3 classes
    renamed = shutil.copytree(pets, tmp_path / "renamed")
    for split in ("train", "val"):
        (renamed / split / "cat").rename(renamed / split / "ant")
    shutil.rmtree(out)
    assert make_shards(["--imagefolder", str(renamed), "--out", str(out), "--shard-size", "5"]) == 0
    capsys.readouterr()
    assert shard_train.main([*argv, "--num-epochs", "2"]) == 1  # the same bytes, other names
    assert "classes 'cat, dog, fish' -> 'ant, dog, fish'" in capsys.readouterr().err


def test_make_shards_takes_one_imagefolder_split_too(pets, tmp_path):
    assert make_shards(["--imagefolder", str(pets / "train"), "--out", str(tmp_path)]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["classes"] == list(CLASSES) and manifest["num_samples"] == 12
