"""The trainers' augmentation (common.ddp.data): the per-sample seed, the crop box, CropFlip."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import RandomResizedCrop
from torchvision.transforms.functional import pil_to_tensor

from common.ddp.data import CROP_FLIP_DRAWS, CropFlip, SeededAugment, crop_box, sample_seed


class Pictures(torch.utils.data.Dataset):
    """Six random 40x30 pictures through ``transform``."""

    def __init__(self, transform) -> None:
        rng = np.random.default_rng(0)
        self.images = [Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8))
                       for _ in range(6)]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        return self.transform(self.images[index]), index


def seeded(seed: int = 3) -> SeededAugment:
    generator = torch.Generator()
    return SeededAugment(Pictures(CropFlip(16, generator=generator)), seed=seed,
                         generator=generator)


def test_sample_seed_is_a_fixed_function_of_seed_epoch_and_index():
    assert sample_seed(0, 0, 0) == 2558736989570252433  # no process, rank or hash seed enters
    seeds = {sample_seed(seed, epoch, index) for seed in range(3) for epoch in range(3)
             for index in range(1000)}
    assert len(seeds) == 9000 and all(0 <= value < 2**64 for value in seeds)


def test_a_sample_is_the_same_in_any_order_of_access_and_the_global_rng_is_untouched():
    first, second = seeded(), seeded()
    state = torch.random.get_rng_state()
    forward = [first[i][0] for i in range(6)]
    backward = [second[i][0] for i in reversed(range(6))][::-1]
    assert all(torch.equal(a, b) for a, b in zip(forward, backward, strict=True))
    assert torch.equal(torch.random.get_rng_state(), state)
    second.set_epoch(1)
    assert not all(torch.equal(a, second[i][0]) for i, a in enumerate(forward))


def test_without_a_generator_the_global_rng_is_seeded_and_restored():
    dataset = SeededAugment(Pictures(CropFlip(16)), seed=3)
    state = torch.random.get_rng_state()
    assert torch.equal(dataset[2][0], dataset[2][0])
    assert torch.equal(torch.random.get_rng_state(), state)


def test_pickled_for_a_worker_the_transform_still_draws_from_the_seeded_generator():
    dataset = seeded()
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy.generator is copy.dataset.transform.generator
    assert torch.equal(copy[4][0], dataset[4][0])


def test_crop_flip_is_the_pil_resize_of_the_drawn_box_as_uint8_chw():
    image = Pictures(None).images[0]
    generator = torch.Generator().manual_seed(5)
    out = CropFlip(16, generator=generator)(image)
    draws = torch.rand(CROP_FLIP_DRAWS, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(5)).tolist()
    top, left, height, width = crop_box(40, 30, draws, (0.5, 1.0), (3 / 4, 4 / 3))
    expected = image.resize((16, 16), Image.Resampling.BILINEAR,
                            box=(left, top, left + width, top + height))
    if draws[-1] < 0.5:
        expected = expected.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    assert out.dtype == torch.uint8 and torch.equal(out, pil_to_tensor(expected))


@pytest.mark.parametrize("u", [0.0, 0.3, 0.999])
def test_the_first_box_that_fits_is_taken_inside_the_image(u):
    draws = [u] * (CROP_FLIP_DRAWS - 1)
    top, left, height, width = crop_box(200, 100, draws, (0.5, 1.0), (3 / 4, 4 / 3))
    assert 0 <= top <= 100 - height and 0 <= left <= 200 - width
    assert 0.5 * 20000 * 0.97 <= height * width <= 20000 * 1.03
    assert 3 / 4 * 0.95 <= width / height <= 4 / 3 * 1.05


def test_a_box_that_never_fits_falls_back_to_the_centre_crop_at_the_nearest_ratio():
    draws = [0.999] * (CROP_FLIP_DRAWS - 1)  # the whole area at ratio 4:3 never fits 10:1
    assert crop_box(1000, 100, draws, (1.0, 1.0), (3 / 4, 4 / 3)) == (0, 433, 100, 133)
    assert RandomResizedCrop.get_params(Image.new("RGB", (1000, 100)), [1.0, 1.0],
                                        [3 / 4, 4 / 3]) == (0, 433, 100, 133)  # torchvision's
