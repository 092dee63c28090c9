"""Tests for common.data: the guide's datasets, their validation and the skip policy."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from torchvision import transforms
from torchvision.datasets import ImageFolder

from common.data import (
    BadSampleError,
    CustomDataset,
    CustomImageDataset,
    load_rgb,
    parse_label,
    resolve_inside,
)


@pytest.fixture
def img_dir(tmp_path):
    """Three small valid JPEGs a.jpg, b.jpg, c.jpg in tmp_path/images."""
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in ("a", "b", "c"):
        pixels = rng.integers(0, 256, size=(12, 20, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{name}.jpg", quality=95)
    return folder


def write_csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "labels.csv"
    path.write_text(text)
    return path


def build(tmp_path, img_dir, text, **kwargs):
    return CustomImageDataset(write_csv(tmp_path, text), img_dir, **kwargs)


def test_reads_guide_layout(tiny_data):
    dataset = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))
    frame = pd.read_csv(tiny_data.labels_csv("train"))
    assert len(dataset) == len(frame)
    image, label = dataset[3]
    assert isinstance(image, Image.Image) and image.mode == "RGB"
    assert label == frame.iloc[3, 1] and isinstance(label, int)
    expected = Image.open(tiny_data.images_dir("train") / frame.iloc[3, 0]).convert("RGB")
    assert np.array_equal(np.asarray(image), np.asarray(expected))


def test_transforms_are_applied(tiny_data):
    dataset = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"),
                                 transform=transforms.Compose([transforms.Resize((8, 8)),
                                                               transforms.ToTensor()]),
                                 target_transform=str)
    image, label = dataset[0]
    assert tuple(image.shape) == (3, 8, 8)
    assert isinstance(label, str) and label == str(int(dataset.labels[0]))


def test_index_is_stored_in_numpy_arrays(tiny_data):
    dataset = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))
    assert isinstance(dataset._paths, np.ndarray) and dataset._paths.dtype.kind == "U"
    assert dataset.labels.dtype == np.int64
    with pytest.raises(ValueError):
        dataset.labels[0] = 1  # the public view is read-only


@pytest.mark.parametrize(("text", "fragment"), [
    ("file_name\na.jpg\n", "expected 2 columns"),
    ("file_name,label,extra\na.jpg,1,x\n", "expected 2 columns"),
    ("file_name,label\na.jpg,1\nb.jpg,2,9\n", "line 3"),
    ("", "is empty"),
    ("file_name,label\n", "no rows"),
    ("a.jpg,1\nb.jpg,2\n", "line 1"),
    ("file_name,label\na.jpg,1\nmissing.jpg,0\n", "line 3: file 'missing.jpg' not found"),
    ("file_name,label\n../images/a.jpg,1\n", "line 2: path '../images/a.jpg'"),
    ("file_name,label\na.jpg,cat\n", "line 2: 'a.jpg': label 'cat' is not an integer"),
    ("file_name,label\na.jpg,1\nb.jpg\n", "line 3: 'b.jpg': label '' is not an integer"),
    ("file_name,label\na.jpg,1.5\n", "is not an integer"),
    ("file_name,label\na.jpg,-1\n", "line 2: 'a.jpg': label -1 is not a known class"),
])
def test_bad_csv_names_the_line(tmp_path, img_dir, text, fragment):
    with pytest.raises(BadSampleError, match=None) as error:
        build(tmp_path, img_dir, text)
    assert fragment in str(error.value)
    assert "labels.csv" in str(error.value)


def test_label_outside_num_classes(tmp_path, img_dir):
    with pytest.raises(BadSampleError, match=r"line 3: 'b.jpg': label 6 is not a known class"):
        build(tmp_path, img_dir, "file_name,label\na.jpg,5\nb.jpg,6\n", num_classes=6)


def test_absolute_path_is_refused(tmp_path, img_dir):
    absolute = (img_dir / "a.jpg").resolve()
    with pytest.raises(BadSampleError, match="line 2: path .* must be relative"):
        build(tmp_path, img_dir, f"file_name,label\n{absolute},1\n")


def test_symlink_out_of_img_dir_is_refused(tmp_path, img_dir):
    outside = tmp_path / "secret.jpg"
    outside.write_bytes((img_dir / "a.jpg").read_bytes())
    os.symlink(outside, img_dir / "link.jpg")
    with pytest.raises(BadSampleError, match="line 2: path 'link.jpg' escapes .*symbolic link"):
        build(tmp_path, img_dir, "file_name,label\nlink.jpg,1\n")


def test_symlink_inside_img_dir_is_fine(tmp_path, img_dir):
    os.symlink(img_dir / "a.jpg", img_dir / "alias.jpg")
    assert len(build(tmp_path, img_dir, "file_name,label\nalias.jpg,1\n")) == 1


def test_missing_inputs(tmp_path, img_dir):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        CustomImageDataset(tmp_path / "nope.csv", img_dir)
    with pytest.raises(FileNotFoundError, match="no_dir"):
        CustomImageDataset(write_csv(tmp_path, "file_name,label\na.jpg,1\n"), tmp_path / "no_dir")


def test_corrupt_image_raises_at_load_time_naming_file_and_line(tmp_path, img_dir):
    (img_dir / "b.jpg").write_bytes(b"this is not a jpeg")
    dataset = build(tmp_path, img_dir, "file_name,label\na.jpg,1\nb.jpg,2\n")
    dataset[0]
    with pytest.raises(BadSampleError, match=r"b\.jpg \(labels\.csv line 3\)"):
        dataset[1]


def test_truncated_image_raises(tmp_path, img_dir):
    data = (img_dir / "c.jpg").read_bytes()
    (img_dir / "c.jpg").write_bytes(data[: len(data) // 2])
    dataset = build(tmp_path, img_dir, "file_name,label\nc.jpg,0\n")
    with pytest.raises(BadSampleError, match=r"c\.jpg.*line 2"):
        dataset[0]
    with pytest.raises(BadSampleError, match=r"line 2"):
        build(tmp_path, img_dir, "file_name,label\nc.jpg,0\n", check_images=True)


def test_skip_policy_reports_exactly_what_it_skipped(tmp_path, img_dir):
    (img_dir / "c.jpg").write_bytes(b"garbage")
    text = "file_name,label\na.jpg,1\nmissing.jpg,2\nb.jpg,x\nb.jpg,3\nc.jpg,4\n"
    with pytest.warns(UserWarning, match=r"skipped 3 bad row\(s\) at line\(s\) 3, 4, 6"):
        dataset = build(tmp_path, img_dir, text, on_bad="skip", check_images=True)
    assert len(dataset) == 2
    assert dataset.skipped["line"].tolist() == [3, 4, 6]
    assert dataset.skipped["file_name"].tolist() == ["missing.jpg", "b.jpg", "c.jpg"]
    assert dataset.labels.tolist() == [1, 3]


def test_no_warning_when_nothing_skipped(tmp_path, img_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dataset = build(tmp_path, img_dir, "file_name,label\na.jpg,1\n", on_bad="skip")
    assert dataset.skipped.empty


def test_on_bad_must_be_known(tmp_path, img_dir):
    with pytest.raises(ValueError, match="on_bad"):
        build(tmp_path, img_dir, "file_name,label\na.jpg,1\n", on_bad="ignore")


def test_parse_label_and_resolve_inside(tmp_path, img_dir):
    assert parse_label(" 3 ", where="x") == 3
    with pytest.raises(BadSampleError, match="^here: label"):
        parse_label("3x", where="here")
    assert resolve_inside(img_dir, "a.jpg", where="w") == (img_dir / "a.jpg").resolve()
    with pytest.raises(BadSampleError, match="^w: file 'zz.jpg' not found"):
        resolve_inside(img_dir, "zz.jpg", where="w")


def test_load_rgb_converts_to_rgb(tmp_path):
    Image.new("L", (5, 4), color=7).save(tmp_path / "gray.png")
    image = load_rgb(tmp_path / "gray.png")
    assert image.mode == "RGB" and image.size == (5, 4)


# --- CustomDataset (guide §2.3.1) -----------------------------------------------------

def test_custom_dataset_matches_imagefolder(tiny_data):
    root = tiny_data.imagefolder_dir("train")
    reference = ImageFolder(root)
    listed = sorted(str(p) for p in Path(root).glob("*/*.jpg"))  # an independent listing
    dataset = CustomDataset(listed)
    assert dataset.classes == reference.classes
    assert dataset.class_to_idx == reference.class_to_idx
    assert dataset.samples == reference.samples
    assert CustomDataset.from_folder(root).samples == reference.samples
    image, label = dataset[5]
    ref_image, ref_label = reference[5]
    assert label == ref_label
    assert np.array_equal(np.asarray(image), np.asarray(ref_image))


def test_custom_dataset_get_label_and_unknown_class(tiny_data):
    files = sorted(Path(tiny_data.imagefolder_dir("train")).glob("*/*.jpg"))
    dataset = CustomDataset(files, classes=tiny_data.classes)
    for path, label in dataset.samples:
        assert tiny_data.classes[label] == Path(path).parent.name
    with pytest.raises(BadSampleError, match="folder 'circle' is not a known class"):
        CustomDataset(files, classes=["square"])


def test_custom_dataset_validates_files(tmp_path, img_dir):
    with pytest.raises(BadSampleError, match="empty"):
        CustomDataset([])
    with pytest.raises(BadSampleError, match=r"file_list\[1\]: file .*nope.jpg.* not found"):
        CustomDataset([img_dir / "a.jpg", img_dir / "nope.jpg"])
    outside = tmp_path / "out.jpg"
    outside.write_bytes((img_dir / "a.jpg").read_bytes())
    with pytest.raises(BadSampleError, match=r"file_list\[0\]"):
        CustomDataset([outside], root=img_dir)


def test_load_rgb_names_a_numpy_string_path_plainly(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(BadSampleError, match="bad.jpg") as caught:
        load_rgb(np.array([str(bad)])[0])  # the datasets store paths as NumPy strings
    assert "np.str_" not in str(caught.value)
