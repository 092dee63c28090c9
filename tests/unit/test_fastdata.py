"""common.fast.pipeline: the uint8 formulations reproduce the guide's eval tensors."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from torchvision import transforms
from torchvision.transforms.functional import pil_to_tensor

from common.data import BadSampleError, CustomImageDataset
from common.fast.pipeline import (
    BatchNormalize,
    BatchRandomFlip,
    DraftPilDecoder,
    NormalizedLoader,
    TorchvisionDecoder,
    Uint8EvalDataset,
    center_box,
    decode_tensor,
    make_decoder,
    make_fast_loader,
    resized_size,
)
from common.transforms import IMAGENET_STD, ClassicEvalPreset

#: Tolerances, in normalized units. One uint8 level is 1/255/std, about 0.0175.
EXACT = 1e-5                                  # same PIL resampling: float rounding only
ONE_LEVEL = 1.0 / 255.0 / min(IMAGENET_STD)
TORCHVISION_MAX = 2 * ONE_LEVEL               # tensor vs PIL antialiasing: <= 2 levels
DRAFT_MEAN = 0.02                             # DCT-domain downscale: mean |diff| ~ 1 level


def _reference(data, count: int) -> torch.Tensor:
    guide = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"),
                               ClassicEvalPreset())
    return torch.stack([guide[i][0] for i in range(count)])


def _big_jpeg(path, size=(640, 520)) -> None:
    y, x = np.mgrid[0:size[1], 0:size[0]]
    pixels = np.stack([(x * 0.4) % 256, (y * 0.5) % 256, ((x + y) * 0.3) % 256], -1)
    image = Image.fromarray(pixels.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    draw.ellipse((100, 100, 400, 400), fill=(200, 30, 40))
    image.save(path, quality=90)


@pytest.mark.parametrize("decoder", ["pil", "pil_draft"])
def test_pil_decoders_match_guide_exactly_on_small_images(tiny_data, decoder):
    reference = _reference(tiny_data, 12)
    dataset = Uint8EvalDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"),
                               decoder=decoder)
    images, _ = dataset.__getitems__(list(range(12)))
    assert images.dtype == torch.uint8 and images.shape == (12, 3, 224, 224)
    assert torch.allclose(BatchNormalize()(images), reference, atol=EXACT, rtol=0)


def test_torchvision_decoder_within_two_levels(tiny_data):
    reference = _reference(tiny_data, 12)
    dataset = Uint8EvalDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"),
                               decoder="torchvision")
    images, _ = dataset.__getitems__(list(range(12)))
    difference = (BatchNormalize()(images) - reference).abs()
    assert difference.max() <= TORCHVISION_MAX
    assert difference.mean() < 0.1 * ONE_LEVEL


def test_draft_mode_applies_to_large_jpeg_and_stays_close(tmp_path):
    path = tmp_path / "big.jpg"
    _big_jpeg(path)
    with Image.open(path) as image:
        reference = ClassicEvalPreset()(image.convert("RGB"))
    full = BatchNormalize()(DraftPilDecoder(draft=False)(path)[None])[0]
    draft = BatchNormalize()(DraftPilDecoder(draft=True)(path)[None])[0]
    assert torch.allclose(full, reference, atol=EXACT, rtol=0)
    assert draft.shape == reference.shape
    assert not torch.allclose(draft, reference, atol=EXACT)  # draft really decoded smaller
    assert (draft - reference).abs().mean() < DRAFT_MEAN


@pytest.mark.parametrize("size", [(300, 200), (200, 300), (257, 256), (401, 999), (256, 256)])
def test_geometry_helpers_match_torchvision(size):
    image = Image.new("RGB", size)
    resized = transforms.Resize(256)(image)
    assert resized_size(*size, 256) == resized.size
    left, top, right, bottom = center_box(*resized.size, 224)
    expected = transforms.CenterCrop(224)(resized)
    assert (right - left, bottom - top) == expected.size
    marked = Image.fromarray(np.arange(resized.size[0] * resized.size[1] * 3, dtype=np.uint32)
                             .reshape(resized.size[1], resized.size[0], 3).astype(np.uint8))
    assert np.array_equal(np.asarray(marked.crop((left, top, right, bottom))),
                          np.asarray(transforms.CenterCrop(224)(marked)))


def test_getitems_equals_stacked_getitem(tiny_data):
    dataset = Uint8EvalDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))
    indices = [5, 0, 3]
    images, labels = dataset.__getitems__(indices)
    assert torch.equal(images, torch.stack([dataset[i][0] for i in indices]))
    assert labels.tolist() == [int(dataset.labels[i]) for i in indices]


def test_batch_normalize_matches_to_tensor_normalize():
    images = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    guide = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    expected = torch.stack([guide(image.float() / 255) for image in images])
    assert torch.allclose(BatchNormalize()(images), expected, atol=EXACT, rtol=0)
    with pytest.raises(ValueError, match="uint8"):
        BatchNormalize()(images.float())


def test_reused_buffers_give_the_same_batches_and_are_reused():
    images = torch.randint(0, 256, (10, 3, 8, 8), dtype=torch.uint8)
    fresh, ring = BatchNormalize(), BatchNormalize(buffers=2)
    outputs = []
    for batch in (images[:4], images[4:8], images[8:]):  # the last batch is shorter
        out = ring(batch)
        assert torch.equal(out, fresh(batch))  # bit-identical: the same float operations
        outputs.append(out.data_ptr())
    assert outputs[0] == outputs[2] != outputs[1]
    with pytest.raises(ValueError, match="buffers"):
        BatchNormalize(buffers=-1)


def test_decode_tensor_is_quiet_and_matches_pil(tiny_data):
    path = tiny_data.images_dir("train") / sorted(os.listdir(tiny_data.images_dir("train")))[0]
    data = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning, the deprecation included, fails here
        image = decode_tensor(data, jpeg=True)
    assert torch.equal(image, decode_tensor(data))
    with Image.open(path) as pil:
        assert torch.equal(image, pil_to_tensor(pil.convert("RGB")))


def test_normalized_loader_reproduces_reference_batches(tiny_data):
    reference = _reference(tiny_data, 24)
    dataset = Uint8EvalDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))
    loader = NormalizedLoader(make_fast_loader(dataset, batch_size=10))
    batches = list(loader)
    assert len(loader) == 3 and [len(b[1]) for b in batches] == [10, 10, 4]
    assert torch.allclose(torch.cat([b[0] for b in batches]), reference, atol=EXACT, rtol=0)


def test_bad_file_is_named(tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    for name in ("pil_draft", "torchvision"):
        with pytest.raises(BadSampleError, match="broken.jpg"):
            make_decoder(name)(broken)
    with pytest.raises(ValueError, match="unknown decoder"):
        make_decoder("magic")
    assert isinstance(make_decoder("torchvision"), TorchvisionDecoder)


def test_batch_random_flip_flips_each_sample_independently():
    images = torch.arange(64 * 3 * 2 * 5, dtype=torch.uint8).view(64, 3, 2, 5)
    out = BatchRandomFlip(generator=torch.Generator().manual_seed(0))(images)
    flipped = [torch.equal(o, i.flip(-1)) for o, i in zip(out, images, strict=True)]
    kept = [torch.equal(o, i) for o, i in zip(out, images, strict=True)]
    assert all(f != k for f, k in zip(flipped, kept, strict=True))
    assert 10 < sum(flipped) < 54  # p=0.5 per sample, not one decision per batch
    assert torch.equal(BatchRandomFlip(p=0.0)(images), images)
