"""Tests for common.data: the guide's datasets, their validation and the skip policy."""

from __future__ import annotations

import os
import struct
import warnings
import zlib
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
    assert isinstance(dataset.paths, np.ndarray) and dataset.paths.dtype.kind == "U"
    assert dataset.labels.dtype == np.int64 and dataset.lines.tolist() == list(range(2, len(dataset) + 2))
    for index in (dataset.paths, dataset.labels, dataset.lines):
        with pytest.raises(ValueError):
            index[0] = index[1]  # the public views are read-only


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


def test_custom_dataset_from_folder_is_the_one_listing(tmp_path, capsys):
    from common.images.examples import MESSY_CLASSES, write_messy_split
    from common.images.listing import FolderError, list_folder

    root = tmp_path / "train"
    expected = write_messy_split(root, 2)
    (root / "dog" / "loose").mkdir()
    Image.new("RGB", (9, 9), (1, 2, 3)).save(root / "dog" / "loose" / "deeper.png")  # one down
    dataset = CustomDataset.from_folder(root)
    said = capsys.readouterr().out.splitlines()
    assert len(said) == 1 and "skipped" in said[0] and "notes.txt" in said[0]  # out loud, once
    assert dataset.classes == list(MESSY_CLASSES)  # café in NFC, though its folder is NFD
    assert dataset.samples == list_folder(root).samples
    relative = [os.path.relpath(path, root) for path, _ in dataset.samples]
    assert set(expected) < set(relative) and "dog/loose/deeper.png" in relative
    assert dict(zip(relative, dataset.labels, strict=True))["dog/loose/deeper.png"] == 1
    os.mkfifo(root / "dog" / "pipe.jpg")
    with pytest.raises(FolderError, match="pipe.jpg"):
        CustomDataset.from_folder(root)


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


# --- decompression bombs, encodings, huge labels, duplicates ----------------------------

def png_header(path: Path, width: int, height: int) -> Path:
    """A valid PNG header claiming ``width x height`` pixels, with almost no pixel data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                     + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))
    return path


@pytest.mark.parametrize(("side", "pixels"), [(20000, "400000000 pixels"),  # PIL's error
                                              (11000, "121,000,000 pixels")])  # PIL only warns
def test_huge_image_names_file_and_line(tmp_path, img_dir, side, pixels):
    png_header(img_dir / "bomb.png", side, side)
    dataset = build(tmp_path, img_dir, "file_name,label\na.jpg,1\nbomb.png,2\n")
    message = rf"bomb\.png \(labels\.csv line \d\): .*{pixels}.*MAX_IMAGE_PIXELS"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PIL's warning is not the answer: an error is
        with pytest.raises(BadSampleError, match=message):
            dataset[1]
        with pytest.raises(BadSampleError, match=message):
            build(tmp_path, img_dir, "file_name,label\nbomb.png,2\n", check_images=True)


def test_the_pixel_limit_can_be_raised_and_lowered(tmp_path, img_dir):
    Image.new("RGB", (100, 100)).save(img_dir / "big.png")
    text = "file_name,label\nbig.png,0\n"
    assert build(tmp_path, img_dir, text, check_images=True)[0][0].size == (100, 100)
    with pytest.raises(BadSampleError, match=r"10,000 pixels is over the limit of 5,000 .*"
                                             r"max_pixels="):
        build(tmp_path, img_dir, text, check_images=True, max_pixels=5000)
    png_header(img_dir / "tall.png", 1, 200_000_000)  # over twice PIL's own limit
    with pytest.raises(BadSampleError, match=r"tall\.png .*raise PIL\.Image\.MAX_IMAGE_PIXELS"):
        build(tmp_path, img_dir, "file_name,label\ntall.png,0\n", max_pixels=10**9)[0]
    with pytest.raises(BadSampleError, match="over the limit of 50"):
        CustomDataset([img_dir / "big.png"], max_pixels=50)[0]


@pytest.mark.parametrize(("data", "message"), [
    ("file_name,label\na.jpg,1\nb\xe9.jpg,2\n".encode("latin-1"),
     r"labels\.csv line 3: not UTF-8 text \(byte 0xe9\)"),
    (b"file_name,label\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
     r"labels\.csv line 4: holds a NUL byte"),
    (b"file_name,label\na\x00.jpg,1\n", r"labels\.csv line 2: holds a NUL byte"),
])
def test_non_utf8_or_binary_csv_names_the_line(tmp_path, img_dir, data, message):
    (tmp_path / "labels.csv").write_bytes(data)
    with pytest.raises(BadSampleError, match=message):
        CustomImageDataset(tmp_path / "labels.csv", img_dir)


def test_nul_in_a_file_name_and_huge_label_name_the_row(tmp_path, img_dir):
    with pytest.raises(BadSampleError, match=r"^w: path 'a\\x00\.jpg' holds a NUL byte"):
        resolve_inside(img_dir, "a\x00.jpg", where="w")
    with pytest.raises(BadSampleError, match=r"file_list\[0\]: path .* holds a NUL byte"):
        CustomDataset([str(img_dir / "a\x00.jpg")], root=img_dir)
    with pytest.raises(BadSampleError, match=r"line 3: 'b\.jpg': label '99999999999999999999' "
                                             "does not fit in a 64-bit integer"):
        build(tmp_path, img_dir, "file_name,label\na.jpg,1\nb.jpg,99999999999999999999\n")


def test_a_file_with_two_labels_is_refused_and_repeats_are_reported(tmp_path, img_dir):
    with pytest.raises(BadSampleError, match=r"labels\.csv line 4: file 'a\.jpg' has conflicting "
                                             r"labels \(line 2 label 1, line 4 label 3\)"):
        build(tmp_path, img_dir, "file_name,label\na.jpg,1\nb.jpg,2\n./a.jpg,3\n")
    with pytest.warns(UserWarning, match=r"1 row\(s\) repeat a file already listed with the same "
                                         r"label, first 'b\.jpg' at line 4 \(also line 3\)"):
        dataset = build(tmp_path, img_dir, "file_name,label\na.jpg,1\nb.jpg,2\nb.jpg,2\n")
    assert len(dataset) == 3 and dataset.duplicates.values.tolist() == [[4, "b.jpg", 3]]
    with pytest.warns(UserWarning, match=r"skipped 2 bad row\(s\) at line\(s\) 2, 4"):
        dataset = build(tmp_path, img_dir, "file_name,label\na.jpg,1\nb.jpg,2\na.jpg,3\n",
                        on_bad="skip")
    assert dataset.labels.tolist() == [2]
