"""common.fast.cache: built once, rebuilt when the source changes, damage detected."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image

from common.data import CustomImageDataset
from common.fast import cache as cache_module
from common.fast.cache import (
    CacheConfig,
    CachedImageDataset,
    CacheError,
    ensure_cache,
    open_cache,
    verify_cache,
)
from common.fast.cache_files import manifest_digest
from common.fast.pipeline import BatchNormalize, CacheLoader
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


def _flip_byte(path, offset: int = 1000, *, keep_mtime: bool) -> None:
    before = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([value[0] ^ 0xFF]))
    # A later write has a later mtime; pin it so the test does not depend on the clock's
    # resolution. keep_mtime restores the old one (what media corruption looks like).
    mtime = before.st_mtime_ns if keep_mtime else before.st_mtime_ns + 10**9
    os.utime(path, ns=(before.st_atime_ns, mtime))


def test_flipped_byte_is_detected_at_open_and_repaired(source, tmp_path, capsys):
    root = tmp_path / "cache"
    ensure_cache(source, root, indices=range(4), verbose=False)
    _flip_byte(root / "images.u8", keep_mtime=False)
    problems = verify_cache(root)
    assert len(problems) == 1 and "images.u8" in problems[0] and "modified" in problems[0]
    with pytest.raises(CacheError, match="images.u8"):
        open_cache(root)
    ensure_cache(source, root, indices=range(4))
    assert "modified after the cache was built" in capsys.readouterr().out
    assert verify_cache(root, full=True) == []


def test_flip_that_keeps_size_and_mtime_needs_the_full_check(source, tmp_path, capsys):
    root = tmp_path / "cache"
    ensure_cache(source, root, indices=range(4), verbose=False)
    _flip_byte(root / "images.u8", keep_mtime=True)
    assert verify_cache(root) == []  # stat-level: indistinguishable, as documented
    problems = verify_cache(root, full=True)
    assert len(problems) == 1 and "sha256" in problems[0]
    ensure_cache(source, root, indices=range(4), verify="full")
    assert "damaged" in capsys.readouterr().out
    assert verify_cache(root, full=True) == []


def test_edited_manifest_is_detected(source, tmp_path):
    root = tmp_path / "cache"
    ensure_cache(source, root, indices=range(4), verbose=False)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["shape"][0] = 3
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CacheError, match="digest"):
        open_cache(root)


def test_source_image_touched_triggers_rebuild(source, tmp_path, capsys):
    root = tmp_path / "cache"
    ensure_cache(source, root, indices=range(4), verbose=False)
    path = source.path(2)
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    ensure_cache(source, root, indices=range(4))
    assert f"source image {path.name} has changed" in capsys.readouterr().out


def test_opening_an_intact_cache_hashes_only_the_annotations_file(source, tmp_path,
                                                                  monkeypatch):
    root = tmp_path / "cache"
    ensure_cache(source, root, indices=range(8), verbose=False)
    hashed = []
    real = cache_module.file_sha256
    monkeypatch.setattr(cache_module, "file_sha256", lambda path: hashed.append(path) or real(path))
    monkeypatch.setattr(cache_module, "source_fingerprint", _refuse)
    ensure_cache(source, root, indices=range(8), verbose=False)
    CachedImageDataset(root, check=True)
    assert hashed == [source.annotations_file]
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["build_seconds"] > 0


def _refuse(*args, **kwargs):
    raise AssertionError("opening an intact cache must not read the source images")


def test_cache_loader_gives_the_normalized_batches_of_its_sampler(source, tmp_path):
    ensure_cache(source, tmp_path / "cache", indices=range(10), verbose=False)
    dataset = CachedImageDataset(tmp_path / "cache")
    fused = CacheLoader(dataset, batch_size=4, shuffle=True,
                        generator=torch.Generator().manual_seed(5), buffers=2)
    orders = list(CacheLoader(dataset, batch_size=4, shuffle=True,
                              generator=torch.Generator().manual_seed(5)).batch_sampler)
    assert len(fused) == len(orders) == 3 and sorted(sum(orders, [])) == list(range(10))
    seen = []
    for (images, labels), order in zip(fused, orders, strict=True):
        expected, expected_labels = dataset.__getitems__(order)
        assert torch.allclose(images, BatchNormalize()(expected), atol=1e-6, rtol=0)
        assert torch.equal(labels, expected_labels)
        seen.append(images.data_ptr())
    assert seen[0] == seen[2] != seen[1]  # a ring of two reused buffers
    guide = _reference(source, range(10))
    batch, _ = next(iter(CacheLoader(dataset, batch_size=10)))
    assert torch.allclose(batch, guide, atol=1e-5, rtol=0)


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


# --- a manifest that lies about the files, and builders that race ----------------------

def _edit_manifest(root, **changes) -> None:
    """Change manifest entries and recompute its digest (what a careful editor would do)."""
    manifest = json.loads((root / "manifest.json").read_text())
    for key, value in changes.items():
        if key == "crop_size":
            manifest["config"]["crop_size"] = value
        else:
            manifest[key] = value
    manifest["digest"] = manifest_digest(manifest)
    (root / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(("changes", "message"), [
    ({"shape": [4, 3, 16, 16], "crop_size": 16},
     r"shape \(4, 3, 16, 16\) needs 3,072 bytes of uint8, but images\.u8 holds 12,288"),
    ({"shape": [9, 3, 32, 32]}, r"shape \(9, 3, 32, 32\) needs 27,648 bytes of uint8, but "
                                r"images\.u8 holds 12,288"),
    ({"shape": [16, 3, 16, 16], "crop_size": 16},
     r"shape \(16, 3, 16, 16\) means 16 images, but labels\.npy holds int64 \(4,\), not int64 "
     r"\(16,\)"),
    ({"shape": [4, 3, 32, 16]}, r"shape \[4, 3, 32, 16\] is not \[N, 3, 32, 32\]"),
    ({"dtype": "float32"}, r"dtype 'float32', expected 'uint8'"),
])
def test_a_manifest_that_does_not_fit_its_files_is_refused(source, tmp_path, changes, message):
    root = tmp_path / "cache"
    ensure_cache(source, root, CacheConfig(36, 32), indices=range(4), verbose=False)
    _edit_manifest(root, **changes)
    for opening in (open_cache, CachedImageDataset):
        with pytest.raises(CacheError, match=message) as error:
            opening(root)
        assert "manifest.json" in str(error.value) and "\n" not in str(error.value)
    assert ensure_cache(source, root, CacheConfig(36, 32), indices=range(4),
                        verbose=False).images.shape == (4, 3, 32, 32)  # rebuilt
    assert verify_cache(root, full=True) == []


def test_an_unchecked_open_of_a_lying_manifest_is_one_cache_error(source, tmp_path):
    root = tmp_path / "cache"
    ensure_cache(source, root, CacheConfig(36, 32), indices=range(4), verbose=False)
    _edit_manifest(root, shape=[9, 3, 32, 32])
    with pytest.raises(CacheError, match=r"cache at .*cache: cannot map images\.u8 as "
                                         r"\[9, 3, 32, 32\]"):
        open_cache(root, check=False)


def test_two_builders_of_one_cold_cache_take_turns(source, tmp_path, monkeypatch, capsys):
    root = tmp_path / "cache"
    real = cache_module.source_stats

    def slow(*args):  # hold the build open between its first file and its manifest
        time.sleep(0.3)
        return real(*args)

    monkeypatch.setattr(cache_module, "source_stats", slow)
    start = threading.Barrier(2)

    def build(_):
        start.wait()  # both look at the cold cache at once
        return ensure_cache(source, root, CacheConfig(36, 32), indices=range(4))

    with ThreadPoolExecutor(2) as pool:
        caches = list(pool.map(build, range(2)))  # an error in either is raised here
    out = capsys.readouterr().out
    assert out.count("Building cache") == 1 and out.count("Cache OK") == 1  # waited, then used
    assert np.array_equal(caches[0].images, caches[1].images)
    assert (root / ".build.lock").is_file() and verify_cache(root, full=True) == []
