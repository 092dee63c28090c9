"""Tests for common.loaders: collate functions, the balanced sampler, seeding, spawn-safety — the tests that start processes (the rest: tests/unit/test_loaders.py)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import ConcatDataset, DataLoader
from torchvision import transforms

from common.data import CustomDataset, CustomImageDataset
from common.loaders import PadCollate, seed_worker
from common.transforms import AddGaussianNoise, ClassicTrainPreset, V2TrainPreset
from tests.unit.test_loaders import first_batches, random_pipeline, same


@pytest.mark.parametrize("num_workers", [0, 2])
def test_seeded_loader_gives_the_same_first_batches(tiny_data, num_workers):
    dataset = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"),
                                 transform=random_pipeline())
    first = first_batches(dataset, 7, num_workers=num_workers)
    again = first_batches(dataset, 7, num_workers=num_workers)
    other = first_batches(dataset, 8, num_workers=num_workers)
    assert same(first, again)
    assert not same(first, other)


@pytest.mark.slow
def test_everything_a_worker_needs_survives_spawn(tiny_data):
    # spawn re-imports what the workers get: classes from a notebook would fail here.
    # One loader (one worker start-up) carries both datasets, classic and v2 presets,
    # the custom transform, the collate function and worker_init_fn.
    by_csv = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"),
                                transform=transforms.Compose([ClassicTrainPreset(crop_size=16),
                                                              AddGaussianNoise(std=0.1)]))
    by_folder = CustomDataset.from_folder(tiny_data.imagefolder_dir("val"),
                                          transform=V2TrainPreset(crop_size=16))
    dataset = ConcatDataset([by_csv, by_folder])
    loader = DataLoader(dataset, batch_size=5, num_workers=1, multiprocessing_context="spawn",
                        collate_fn=PadCollate(), worker_init_fn=seed_worker)
    seen = torch.cat([labels for _, labels, _ in loader]).tolist()
    assert seen == by_csv.labels.tolist() + by_folder.labels.tolist()
