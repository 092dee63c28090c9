"""Tests for common.datasets.iterable: per-worker (and per-rank) splitting of the CSV stream."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms

from common.data import BadSampleError
from common.datasets.iterable import CsvImageStream
from tests.unit.test_data import png_header

TO_TENSOR = transforms.Compose([transforms.Resize((8, 8)), transforms.PILToTensor()])


def fingerprints(stream, num_workers=0, **kwargs):
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers, **kwargs)
    return Counter(hashlib.sha1(image.numpy().tobytes()).hexdigest() + f":{label}"
                   for image, label in loader)


def stream(tiny_data, **kwargs):
    return CsvImageStream(tiny_data.labels_csv("train"), tiny_data.images_dir("train"),
                          TO_TENSOR, **kwargs)


def test_ranks_split_the_rows(tiny_data):
    parts = [fingerprints(stream(tiny_data, rank=r, world_size=3)) for r in range(3)]
    assert sum(parts, Counter()) == fingerprints(stream(tiny_data))
    assert all(sum(part.values()) == 8 for part in parts)
    with pytest.raises(ValueError, match="rank"):
        stream(tiny_data, rank=3, world_size=3)


def test_shuffle_buffer_reorders_but_keeps_every_sample(tiny_data):
    plain = [label for _, label in stream(tiny_data)]
    shuffled = stream(tiny_data, shuffle_buffer=8, seed=1)
    first = [label for _, label in shuffled]
    shuffled.set_epoch(1)
    second = [label for _, label in shuffled]
    assert sorted(first) == sorted(plain) == sorted(second)
    assert first != plain and first != second


def test_bad_row_names_its_line(tmp_path, tiny_data):
    csv = tmp_path / "labels.csv"
    csv.write_text("file_name,label\nimg_00000.jpg,1\nimg_00001.jpg,dog\n")
    rows = CsvImageStream(csv, tiny_data.images_dir("train")).rows()
    next(rows)
    with pytest.raises(BadSampleError, match="labels.csv line 3: 'img_00001.jpg': label 'dog'"):
        next(rows)
    csv.write_text("file_name,label\n../x.jpg,1\n")
    with pytest.raises(BadSampleError, match="line 2: path '../x.jpg'"):
        next(iter(CsvImageStream(csv, tiny_data.images_dir("train"))))


@pytest.mark.parametrize(("data", "message"), [
    ("file_name,label\nimg_00000.jpg,1\nimg_\xe9.jpg,2\n".encode("latin-1"),
     r"labels\.csv line 3: not UTF-8 text \(byte 0xe9\)"),
    (b"file_name,label\nimg_0\x00.jpg,1\n", r"labels\.csv line 2: holds a NUL byte"),
    (b"file_name,label\nimg_00000.jpg,99999999999999999999\n",
     r"line 2: 'img_00000\.jpg': label '99999999999999999999' does not fit in a 64-bit"),
    (b"file_name,label\nimg_00000.jpg,1\nimg_00001.jpg,2\n./img_00000.jpg,4\n",
     r"line 4: file './img_00000\.jpg' has conflicting labels \(line 2 label 1, line 4 label 4\)"),
])
def test_undecodable_or_conflicting_rows_name_their_line(tmp_path, tiny_data, data, message):
    csv = tmp_path / "labels.csv"
    csv.write_bytes(data)
    with pytest.raises(BadSampleError, match=message):
        list(CsvImageStream(csv, tiny_data.images_dir("train")).rows())


def test_repeated_rows_are_reported_and_streamed(tmp_path, tiny_data):
    csv = tmp_path / "labels.csv"
    csv.write_text("file_name,label\nimg_00000.jpg,1\nimg_00001.jpg,2\nimg_00000.jpg,1\n")
    with pytest.warns(UserWarning, match=r"1 row\(s\) repeat a file .* 'img_00000\.jpg' at line 4"):
        rows = list(CsvImageStream(csv, tiny_data.images_dir("train")).rows())
    assert [line for line, _, _ in rows] == [2, 3, 4]


def test_huge_image_names_its_line(tmp_path, tiny_data):
    png_header(tmp_path / "bomb.png", 20000, 20000)
    (tmp_path / "labels.csv").write_text("file_name,label\nbomb.png,1\n")
    with pytest.raises(BadSampleError, match=r"bomb\.png \(labels\.csv line 2\)"):
        next(iter(CsvImageStream(tmp_path / "labels.csv", tmp_path)))
    Image.new("RGB", (10, 10)).save(tmp_path / "small.png")
    (tmp_path / "labels.csv").write_text("file_name,label\nsmall.png,1\n")
    with pytest.raises(BadSampleError, match=r"small\.png .*over the limit of 99"):
        next(iter(CsvImageStream(tmp_path / "labels.csv", tmp_path, max_pixels=99)))
