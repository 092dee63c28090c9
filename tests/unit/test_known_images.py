"""An ImageFolder's listing opens a file once while it is unchanged (``common.images.listing.KnownImages``).

The trainers' listing decides each file by its content (Pillow opens its header). The images it
found are kept beside the run's caches with each file's size, modification and change times and
inode; the next listing opens only the files whose four changed. What it lists never differs
from a listing that opens every file.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

import common.images.listing as listing_module
from common.images.layouts import data_identity, file_list, folder_data
from common.images.listing import KnownImages, list_folder


def _write_folder(root: Path) -> Path:
    for split, count in (("train", 3), ("val", 2)):
        for name, colour in (("cat", "red"), ("dog", "blue")):
            folder = root / split / name
            folder.mkdir(parents=True)
            for index in range(count):
                Image.new("RGB", (8 + index, 8), colour).save(folder / f"{index}.png")
    (root / "train" / "dog" / "notes.txt").write_text("not an image\n")
    return root


@pytest.fixture
def opened(monkeypatch):
    """Counts the files the content check opens, by name."""
    counts, check = Counter(), listing_module.image_format

    def counted(path):
        counts[Path(path).name if Path(path).parent.name != "dog" else f"dog/{Path(path).name}"] += 1
        return check(path)

    monkeypatch.setattr(listing_module, "image_format", counted)
    return counts


def _same(one, other) -> bool:
    return (one.samples, one.formats, one.classes, [str(e) for e in one.skipped],
            [str(e) for e in one.problems]) == (other.samples, other.formats, other.classes,
                                               [str(e) for e in other.skipped],
                                               [str(e) for e in other.problems])


def test_an_unchanged_folder_is_listed_again_without_opening_its_images(tmp_path, opened):
    root = _write_folder(tmp_path / "pets") / "train"
    known = tmp_path / "cache" / "known.json"
    first = list_folder(root, known=known)
    assert sum(opened.values()) == 7 and known.is_file()  # 6 images and the text file
    opened.clear()
    again = list_folder(root, known=known)
    assert opened == Counter({"dog/notes.txt": 1})  # not an image: checked every time
    assert _same(again, first) and _same(again, list_folder(root))
    assert len(json.loads(known.read_text())["files"]) == 6


def test_the_record_is_written_only_when_the_folder_changed(tmp_path, opened):
    root = _write_folder(tmp_path / "pets") / "train"
    known = tmp_path / "known.json"
    list_folder(root, known=known)
    written = known.stat().st_mtime_ns, known.stat().st_ino
    list_folder(root, known=known)
    assert (known.stat().st_mtime_ns, known.stat().st_ino) == written
    (root / "cat" / "1.png").unlink()
    listing = list_folder(root, known=known)
    assert "cat/1.png" not in json.loads(known.read_text())["files"]
    assert [Path(path).name for path, _ in listing.samples].count("1.png") == 1  # the dog's


def test_a_file_replaced_with_the_same_size_and_time_is_opened_again(tmp_path, opened):
    """Size and modification time alone would keep a damaged file listed as an image."""
    root = _write_folder(tmp_path / "pets") / "train"
    known = tmp_path / "known.json"
    list_folder(root, known=known)
    target = root / "cat" / "2.png"
    before = target.stat()
    target.write_bytes(b"\0" * before.st_size)  # same size, not an image
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # same modification time
    opened.clear()
    listing = list_folder(root, known=known)
    assert opened["2.png"] == 1
    assert [str(entry.path) for entry in listing.problems] == [str(target)]
    assert "damaged file" in listing.problems[0].reason


def test_a_touched_or_copied_folder_is_checked_again(tmp_path, opened):
    root = _write_folder(tmp_path / "pets") / "train"
    known = tmp_path / "known.json"
    list_folder(root, known=known)
    os.utime(root / "cat" / "0.png")
    opened.clear()
    list_folder(root, known=known)
    assert opened == Counter({"0.png": 1, "dog/notes.txt": 1})
    copy = Path(shutil.copytree(root, tmp_path / "copy"))  # new inodes, other paths
    opened.clear()
    assert _same(list_folder(copy, known=known), list_folder(copy))
    assert sum(opened.values()) == 2 * 7


@pytest.mark.parametrize("content", ["{not json", '{"version": 99, "files": {}}', "[1, 2]",
                                     '{"version": 1, "files": {"cat/0.png": [1, 2]}}'])
def test_a_damaged_record_is_checked_from_scratch_and_rewritten(tmp_path, opened, content):
    root = _write_folder(tmp_path / "pets") / "train"
    known = tmp_path / "known.json"
    known.write_text(content)
    assert _same(list_folder(root, known=known), list_folder(root))
    assert KnownImages(known).recorded.keys() == {"cat/0.png", "cat/1.png", "cat/2.png",
                                                  "dog/0.png", "dog/1.png", "dog/2.png"}


def test_a_record_that_cannot_be_written_leaves_the_listing_as_it_is(tmp_path):
    root = _write_folder(tmp_path / "pets") / "train"
    (tmp_path / "blocked").write_text("a file where the cache folder goes\n")
    listing = list_folder(root, known=tmp_path / "blocked" / "known.json")
    assert _same(listing, list_folder(root))


def test_the_trainers_imagefolder_keeps_its_record_beside_its_caches(tmp_path, opened):
    root = _write_folder(tmp_path / "pets")
    data = folder_data(root)
    data.dataset("val")
    cache = tmp_path / "cache" / "pets-imagefolder"
    assert data.cache_root == data.known_images == cache
    assert sorted(path.name for path in cache.iterdir()) == ["known_images_train.json",
                                                             "known_images_val.json"]
    opened.clear()
    again = folder_data(root)
    again.dataset("val")
    assert opened == Counter({"dog/notes.txt": 1})
    assert data_identity(again) == data_identity(data)


def test_a_runs_file_list_is_made_once_and_names_the_same_files(tmp_path):
    data = folder_data(_write_folder(tmp_path / "pets"))
    assert data.file_list("train") is data.file_list("train")
    direct = file_list(data.dataset("train"))
    assert data.file_list("train").sha256 == direct.sha256
    assert data.file_list("train").listing.decode().splitlines()[1] == f"cat{os.sep}0.png\t0"


def test_making_shards_of_an_imagefolder_writes_nothing_beside_it(tmp_path):
    from common.shards.make import convert_imagefolder

    root = _write_folder(tmp_path / "pets")
    convert_imagefolder(root, tmp_path / "shards", shard_size=4, prefix="shard")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pets", "shards"]
    assert folder_data(root, remember=False).known_images is None
