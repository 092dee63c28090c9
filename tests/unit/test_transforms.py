"""Tests for common.transforms: the presets and the custom noise transform."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from common.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    AddGaussianNoise,
    ClassicEvalPreset,
    ClassicTrainPreset,
    V2EvalPreset,
    V2TrainPreset,
)


@pytest.fixture
def image():
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, size=(90, 120, 3), dtype=np.uint8))


def test_to_tensor_only_scales_to_unit_range(image):
    tensor = transforms.ToTensor()(image)
    assert tensor.dtype == torch.float32
    assert tensor.min() >= 0 and tensor.max() <= 1
    np.testing.assert_allclose(tensor.permute(1, 2, 0).numpy() * 255, np.asarray(image), atol=1e-4)
    assert abs(tensor.mean().item()) > 0.3  # not normalized to zero mean


@pytest.mark.parametrize("preset", [ClassicEvalPreset, V2EvalPreset])
def test_eval_presets_match_manual_normalize(preset, image):
    out = preset(resize_size=40, crop_size=32)(image)
    assert tuple(out.shape) == (3, 32, 32) and out.dtype == torch.float32
    manual = transforms.Compose([transforms.Resize(40), transforms.CenterCrop(32),
                                 transforms.ToTensor()])(image)
    expected = (manual - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(
        IMAGENET_STD).view(3, 1, 1)
    assert (out - expected).abs().mean() < 0.05  # classic and v2 resample slightly differently


@pytest.mark.parametrize("preset", [ClassicTrainPreset, V2TrainPreset])
def test_train_presets_are_random_but_seedable(preset, image):
    transform = preset(crop_size=24)
    torch.manual_seed(3)
    first = transform(image)
    torch.manual_seed(3)
    again = transform(image)
    other = transform(image)
    assert tuple(first.shape) == (3, 24, 24)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


@pytest.mark.parametrize("preset", [ClassicTrainPreset, ClassicEvalPreset, V2TrainPreset,
                                    V2EvalPreset])
def test_presets_pickle_for_workers(preset, image):
    transform = pickle.loads(pickle.dumps(preset(crop_size=16)))
    assert tuple(transform(image).shape) == (3, 16, 16)
    assert type(transform).__name__ in repr(transform)


def test_gaussian_noise():
    torch.manual_seed(0)
    zeros = torch.zeros(3, 100, 100)
    noisy = AddGaussianNoise(std=0.2)(zeros)
    assert noisy.std().item() == pytest.approx(0.2, rel=0.05)
    assert torch.equal(AddGaussianNoise(std=0.2, p=0.0)(zeros), zeros)
    with pytest.raises(TypeError, match="float tensor"):
        AddGaussianNoise()(Image.new("RGB", (4, 4)))
    with pytest.raises(ValueError):
        AddGaussianNoise(std=-1.0)
