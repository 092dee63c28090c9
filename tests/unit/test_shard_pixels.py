"""common/shards/pixels.py: the shard trainer's ``--resize`` and ``--normalize``, the DDP trainer's
flags (same names, choices and help), reaching the batches it trains and validates on."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from PIL import Image

from common.ddp.config import TrainConfig
from common.ddp.process_group import DistInfo
from common.imagenet import IMAGENET_MEAN, IMAGENET_STD
from common.shards import train as shard_train
from common.shards.format import write_shards
from common.shards.pixels import SquaredFirst

CPU = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend=None,
               initialized=False)


def _panorama(path, shade: int) -> str:
    """A 2:1 picture: red left quarter, grey middle, blue right quarter (crop keeps the grey)."""
    image = Image.new("RGB", (32, 16), (shade, shade, shade))
    image.paste((250, 0, 0), (0, 0, 8, 16))
    image.paste((0, 0, 250), (24, 0, 32, 16))
    image.save(path)
    return str(path)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("panoramas")
    samples = [(_panorama(root / f"{i}.png", 60 + 20 * i), i % 2) for i in range(6)]
    for split in ("train", "val"):
        write_shards(samples, root / split, shard_size=4, classes=["a", "b"])
    return root


def _batches(shards, *flags) -> tuple[torch.Tensor, torch.Tensor, dict]:
    config = shard_train.parse_args(["--shards", str(shards / "train"), "--val-shards",
                                     str(shards / "val"), "--image-size", "8", "--batch-size", "6",
                                     "--no-augment", "--equalize", "none", *flags])
    train_loader, val_loader = shard_train.build_loaders(config, CPU)
    return next(iter(train_loader))[0], next(iter(val_loader))[0], config


def test_the_flags_are_the_ddp_trainers():
    ours = {field.name: field for field in dataclasses.fields(shard_train.ShardTrainConfig)}
    for field in dataclasses.fields(TrainConfig):
        if field.name in ("resize", "normalize"):
            assert ours[field.name].default == field.default
            assert ours[field.name].metadata == field.metadata  # help and choices
    config = shard_train.parse_args([])
    assert (config.resize, config.normalize) == ("crop", "auto")


@pytest.mark.parametrize("flag, value", [("--resize", "stretch"), ("--normalize", "mine")])
def test_an_unknown_choice_is_refused_naming_the_flag(flag, value, capsys):
    with pytest.raises(SystemExit) as stop:
        shard_train.parse_args([flag, value])
    assert stop.value.code == 2 and flag in capsys.readouterr().err


def test_squared_first_refuses_an_unknown_resize():
    with pytest.raises(ValueError, match="resize must be one of"):
        SquaredFirst("oval", lambda image: image)


def test_dataset_statistics_and_the_size_reach_the_batches(shards):
    train, val, _ = _batches(shards, "--normalize", "dataset")
    assert train.shape == val.shape == (6, 3, 8, 8)
    # The training split's own mean and std: its normalized pixels have mean 0 and std 1.
    torch.testing.assert_close(train.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4, rtol=0)
    torch.testing.assert_close(train.std(dim=(0, 2, 3), correction=0), torch.ones(3), atol=1e-3,
                               rtol=0)
    stored = json.loads((shards / "train" / "statistics_8.json").read_text())
    assert stored["images"] == 6 and stored["resize"] == "crop"


@pytest.mark.parametrize("resize", ["crop", "squash", "pad"])
def test_resize_and_imagenet_statistics_reach_the_batches(shards, resize):
    train, val, _ = _batches(shards, "--normalize", "imagenet", "--resize", resize)
    # Undone with ImageNet's mean and std, the first validation picture's pixels are its own.
    raw = val[0] * torch.tensor(IMAGENET_STD)[:, None, None] + torch.tensor(IMAGENET_MEAN)[:, None, None]
    corner, left, middle = raw[:, 0, 0], raw[:, 4, 0], raw[:, 4, 4]
    torch.testing.assert_close(middle, torch.tensor([60 / 255] * 3), atol=0.01, rtol=0)
    if resize == "crop":  # the middle only: no red edge
        assert left[0] < 0.5
    elif resize == "squash":  # the whole picture: red on the left edge
        assert left[0] > 0.8 and left[2] < 0.1
    else:  # pad: black bars above and below, red on the left in the middle rows
        assert corner.max() < 0.02 and left[0] > 0.8
    # --no-augment: training sees the same pictures (shuffled).
    torch.testing.assert_close(train.sum(dim=(1, 2, 3)).sort().values,
                               val.sum(dim=(1, 2, 3)).sort().values)
