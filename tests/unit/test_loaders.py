"""Tests for common.loaders: collate functions, the balanced sampler, seeding, spawn-safety."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from torchvision import transforms

from common.loaders import PadCollate, balanced_sampler, list_collate, seed_worker
from common.transforms import AddGaussianNoise


def random_pipeline():
    return transforms.Compose([transforms.RandomResizedCrop(16), transforms.ToTensor(),
                               AddGaussianNoise(std=0.1)])


def first_batches(dataset, seed, *, num_workers=0, count=2):
    if num_workers == 0:
        # Without workers, random transforms draw from the main process's global RNG, which
        # the loader's generator does not touch: seed it too. Workers are seeded from the
        # generator alone.
        torch.manual_seed(seed)
    loader = DataLoader(dataset, batch_size=4, shuffle=True, num_workers=num_workers,
                        generator=torch.Generator().manual_seed(seed), worker_init_fn=seed_worker)
    batches = []
    for images, labels in loader:
        batches.append((images, labels))
        if len(batches) == count:
            break
    return batches


def same(a, b):
    return all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b, strict=True))


def test_pad_collate_pads_bottom_right_and_keeps_sizes():
    a, b = torch.ones(3, 2, 5), torch.full((3, 4, 3), 2.0)
    images, labels, sizes = PadCollate(fill=-1.0)([(a, 1), (b, 4)])
    assert tuple(images.shape) == (2, 3, 4, 5)
    assert torch.equal(images[0, :, :2, :5], a) and torch.equal(images[1, :, :4, :3], b)
    assert (images[0, :, 2:] == -1).all() and (images[1, :, :, 3:] == -1).all()
    assert labels.tolist() == [1, 4] and sizes.tolist() == [[2, 5], [4, 3]]
    with pytest.raises(ValueError, match="channel"):
        PadCollate()([(a, 0), (torch.zeros(1, 2, 2), 1)])


def test_list_collate_keeps_images_as_given():
    a, b = torch.zeros(3, 2, 2), torch.zeros(3, 5, 1)
    images, labels = list_collate([(a, 0), (b, 3)])
    assert images[0] is a and images[1] is b
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 3]


def test_balanced_sampler_equalises_classes():
    labels = np.array([0] * 90 + [1] * 8 + [2] * 2)
    sampler = balanced_sampler(labels, num_samples=6000,
                               generator=torch.Generator().manual_seed(0))
    drawn = np.bincount(labels[list(sampler)], minlength=3)
    assert drawn.sum() == 6000
    assert np.all(np.abs(drawn / 6000 - 1 / 3) < 0.03), drawn
    assert len(balanced_sampler(labels)) == len(labels)
    with pytest.raises(ValueError):
        balanced_sampler([])
