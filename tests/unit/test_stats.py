"""Tests for common.stats: one-pass per-channel statistics against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from common.loaders import list_collate
from common.stats import RunningChannelStats, channel_stats


def numpy_stats(images: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    pixels = np.concatenate([image.reshape(image.shape[0], -1) for image in images], axis=1)
    return pixels.mean(axis=1), pixels.std(axis=1)


def test_matches_numpy_over_batches():
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(37, 3, 9, 11, generator=generator) * torch.tensor([1.0, 2.0, 0.5]).view(
        1, 3, 1, 1) + torch.tensor([0.0, -1.0, 3.0]).view(1, 3, 1, 1)
    loader = DataLoader(TensorDataset(images, torch.zeros(37)), batch_size=8)
    stats = channel_stats(loader)
    mean, std = numpy_stats([image.numpy() for image in images])
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(stats.std, std, rtol=1e-6, atol=1e-9)
    assert stats.count == 37 * 9 * 11


def test_variable_size_images_count_every_pixel():
    rng = np.random.default_rng(1)
    images = [rng.normal(5.0, 2.0, size=(3, h, w)).astype(np.float32)
              for h, w in [(4, 5), (10, 3), (7, 7), (1, 1)]]
    dataset = [(torch.from_numpy(image), 0) for image in images]
    stats = channel_stats(DataLoader(dataset, batch_size=3, collate_fn=list_collate))
    mean, std = numpy_stats(images)
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-5)
    np.testing.assert_allclose(stats.std, std, rtol=1e-5)


def test_large_offset_is_numerically_stable():
    # A naive E[x^2] - E[x]^2 in float32 loses the variance entirely at this offset.
    images = torch.full((50, 1, 20, 20), 1e4, dtype=torch.float32)
    images += torch.linspace(-1, 1, 400).view(1, 1, 20, 20)
    running = RunningChannelStats(num_channels=1)
    for batch in images.split(7):
        running.update(batch)
    expected = images.double().std(unbiased=False).item()  # of the stored float32 values
    assert expected > 0.5
    assert running.result().std[0] == pytest.approx(expected, rel=1e-6)


def test_rejects_wrong_shapes_and_empty_input():
    running = RunningChannelStats(num_channels=3)
    with pytest.raises(ValueError, match="expected"):
        running.update(torch.zeros(2, 1, 4, 4))
    with pytest.raises(ValueError, match="no pixels"):
        running.result()
