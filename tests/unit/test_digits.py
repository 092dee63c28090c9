"""common/images/digits.py: arrays written out as an ImageFolder (chapter 7), on tiny arrays, no scikit-learn.

The chapter runs it on scikit-learn's digits under nbval; here the split, the scaling and the
refusals are checked on a few 4x4 images.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from common.images.digits import stratified_split, to_uint8, write_digits_folder
from common.images.layouts import folder_data

LABELS = np.array([0] * 10 + [1] * 5 + [2] * 3)


def _images(count: int = len(LABELS)) -> np.ndarray:
    return np.arange(count * 16, dtype=np.float64).reshape(count, 4, 4) % 17


def test_to_uint8_scales_0_to_max_onto_0_to_255_and_names_a_sample_out_of_range():
    assert to_uint8(np.array([[0.0, 8.0, 16.0]])).tolist() == [[0, 128, 255]]
    bad = np.zeros((3, 2, 2))
    bad[2, 1, 1] = 17
    with pytest.raises(ValueError, match="sample 2: pixel values must lie in 0..16"):
        to_uint8(bad)


def test_the_split_is_seeded_disjoint_complete_and_keeps_every_class_s_share():
    split = stratified_split(LABELS, val_fraction=0.2, seed=0)
    assert np.array_equal(split.val, stratified_split(LABELS, val_fraction=0.2, seed=0).val)
    assert not set(split.train) & set(split.val)
    assert sorted([*split.train, *split.val]) == list(range(len(LABELS)))
    assert np.bincount(LABELS[split.val]).tolist() == [2, 1, 1]  # round(n * 0.2), at least 1
    other = [stratified_split(LABELS, seed=seed).val.tolist() for seed in range(5)]
    assert len({tuple(v) for v in other}) > 1, "the seed chooses which samples"


@pytest.mark.parametrize(("labels", "fraction", "message"), [
    (LABELS, 1.0, "val_fraction must lie in"), (LABELS, 0.0, "val_fraction must lie in"),
    (np.array([0, 0, 1]), 0.5, "class 1: 1 sample"),
])
def test_a_split_that_cannot_give_both_sides_a_sample_is_refused(labels, fraction, message):
    with pytest.raises(ValueError, match=message):
        stratified_split(labels, val_fraction=fraction)


def test_the_folder_is_an_imagefolder_the_trainers_read(tmp_path):
    root = tmp_path / "digits"
    counts = write_digits_folder(_images(), LABELS, root, classes=("zero", "one", "two"))
    assert counts == {"train": 14, "val": 4}
    data = folder_data(root)
    assert (data.kind, data.classes) == ("imagefolder", ("one", "two", "zero"))  # sorted names
    assert len(data.dataset("train")) == 14 and len(data.dataset("val")) == 4
    split = stratified_split(LABELS)
    first = int(split.val[0])
    with Image.open(root / "val" / "zero" / f"{first:04d}.png") as image:
        assert image.mode == "L" and np.array_equal(np.asarray(image), to_uint8(_images())[first])


def test_a_non_empty_folder_or_labels_without_a_name_are_refused(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(ValueError, match="is not empty"):
        write_digits_folder(_images(), LABELS, tmp_path)
    with pytest.raises(ValueError, match=r"labels must lie in 0..1"):
        write_digits_folder(_images(), LABELS, tmp_path / "new", classes=("a", "b"))
    with pytest.raises(ValueError, match=r"expected images \(N, H, W\)"):
        write_digits_folder(_images()[:3], LABELS, tmp_path / "new")
