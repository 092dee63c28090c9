"""Tests for common.datasets.preload: decode once, transform per access."""

from __future__ import annotations

import pytest
import torch
from torchvision import transforms

from common.data import CustomImageDataset
from common.datasets.preload import PreloadedDataset


def test_preloaded_dataset_matches_resizing_on_the_fly(tiny_data):
    source = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))
    preloaded = PreloadedDataset(source, size=(20, 16), transform=transforms.PILToTensor())
    assert len(preloaded) == len(source)
    assert preloaded.labels.tolist() == source.labels.tolist()
    image, label = preloaded[4]
    expected = transforms.PILToTensor()(source[4][0].resize((20, 16)))
    assert tuple(image.shape) == (3, 16, 20) and torch.equal(image, expected)
    assert label == int(source.labels[4])
    with pytest.raises(TypeError, match="PIL image"):
        PreloadedDataset([(torch.zeros(3, 2, 2), 0)], size=(2, 2))
