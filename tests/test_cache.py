"""common.fast.cache: built once, rebuilt when the source changes, damage detected."""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from common.data import CustomImageDataset
from common.fast.cache import (
    CacheConfig,
    CachedImageDataset,
    CacheError,
    ensure_cache,
    open_cache,
    verify_cache,
)
from common.fast.pipeline import BatchNormalize
from common.transforms import ClassicEvalPreset


@pytest.fixture
def source(tiny_data, tmp_path):
    """A private copy of the tiny training split (the tests change its files)."""
    shutil.copytree(tiny_data.root / "train", tmp_path / "train")
    return CustomImageDataset(tmp_path / "train" / "labels.csv", tmp_path / "train" / "images")


def _reference(source: CustomImageDataset, indices) -> torch.Tensor:
    guide = CustomImageDataset(source.annotations_file, source.img_dir, ClassicEvalPreset())
    return torch.stack([guide[i][0] for i in indices])


def test_cache_holds_the_guide_eval_crops(source, tmp_path):
    cache = ensure_cache(source, tmp_path / "cache", indices=range(10), verbose=False)
    assert cache.images.shape == (10, 3, 224, 224) and cache.images.dtype == np.uint8
    assert np.array_equal(cache.labels, source.labels[:10])
    images = BatchNormalize()(torch.from_numpy(np.array(cache.images)))
    assert torch.allclose(images, _reference(source, range(10)), atol=1e-5, rtol=0)
    assert verify_cache(tmp_path / "cache") == []


def test_second_call_reuses_the_cache(source, tmp_path, capsys):
    ensure_cache(source, tmp_path / "cache", indices=range(6))
    stamp = (tmp_path / "cache" / "images.u8").stat().st_mtime_ns
    ensure_cache(source, tmp_path / "cache", indices=range(6))
    assert "Cache OK" in capsys.readouterr().out
    assert (tmp_path / "cache" / "images.u8").stat().st_mtime_ns == stamp


def test_rebuilt_when_a_source_image_changes(source, tmp_path, capsys):
    ensure_cache(source, tmp_path / "cache", indices=range(6))
    Image.new("RGB", (50, 60), (255, 0, 0)).save(source.path(2))
    cache = ensure_cache(source, tmp_path / "cache", indices=range(6))
    assert "has changed" in capsys.readouterr().out
    expected = _reference(source, [2])[0]
    assert torch.allclose(BatchNormalize()(torch.from_numpy(np.array(cache.images[2:3])))[0],
                          expected, atol=1e-5, rtol=0)


def test_rebuilt_when_the_config_or_selection_changes(source, tmp_path, capsys):
    ensure_cache(source, tmp_path / "cache", indices=range(4))
    cache = ensure_cache(source, tmp_path / "cache", CacheConfig(72, 64), indices=range(4))
    assert cache.images.shape == (4, 3, 64, 64)
    cache = ensure_cache(source, tmp_path / "cache", CacheConfig(72, 64), indices=[3, 1])
    assert np.array_equal(cache.labels, source.labels[[3, 1]])
    out = capsys.readouterr().out
    assert "wanted" in out and "different selection" in out


def test_flipped_byte_is_detected_and_repaired(source, tmp_path, capsys):
    root = tmp_path / "cache"
    ensure_cache(source, root, indices=range(4), verbose=False)
    with open(root / "images.u8", "r+b") as handle:
        handle.seek(1000)
        value = handle.read(1)
        handle.seek(1000)
        handle.write(bytes([value[0] ^ 0xFF]))
    problems = verify_cache(root)
    assert len(problems) == 1 and "images.u8" in problems[0] and "sha256" in problems[0]
    with pytest.raises(CacheError, match="images.u8"):
        open_cache(root)
    ensure_cache(source, root, indices=range(4))
    assert "damaged" in capsys.readouterr().out
    assert verify_cache(root) == []


def test_truncated_and_missing_files_are_detected(source, tmp_path):
    root = tmp_path / "cache"
    ensure_cache(source, root, indices=range(4), verbose=False)
    with open(root / "images.u8", "r+b") as handle:
        handle.truncate(100)
    assert "truncated" in verify_cache(root)[0]
    (root / "labels.npy").unlink()
    assert any("labels.npy is missing" in p for p in verify_cache(root))
    (root / "manifest.json").write_text("{not json")
    with pytest.raises(CacheError, match="manifest.json is not valid JSON"):
        open_cache(root)
    (root / "manifest.json").unlink()
    with pytest.raises(CacheError, match="manifest.json is missing"):
        CachedImageDataset(root)


def test_cached_dataset_batches_and_pickles_small(source, tmp_path):
    ensure_cache(source, tmp_path / "cache", indices=range(8), verbose=False)
    dataset = CachedImageDataset(tmp_path / "cache")
    images, labels = dataset.__getitems__([7, 2, 5])
    assert torch.equal(images, torch.stack([dataset[i][0] for i in (7, 2, 5)]))
    assert labels.tolist() == [int(source.labels[i]) for i in (7, 2, 5)]
    payload = pickle.dumps(dataset)
    assert len(payload) < 10_000  # 8 crops are 1.2 MB: the array is not in the pickle
    assert torch.equal(pickle.loads(payload).__getitems__([7, 2, 5])[0], images)


def test_transform_runs_on_each_uint8_sample(source, tmp_path):
    ensure_cache(source, tmp_path / "cache", indices=range(4), verbose=False)
    plain = CachedImageDataset(tmp_path / "cache")
    flipped = CachedImageDataset(tmp_path / "cache", transform=_FlipWidth())
    images, _ = flipped.__getitems__([0, 3])
    assert torch.equal(images, plain.__getitems__([0, 3])[0].flip(-1))


class _FlipWidth:
    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return image.flip(-1)
