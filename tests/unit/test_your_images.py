"""Your own images, messy as they come (``tests/unit/your_images.py``): one listing for every path.

The messy folder holds, per class, images of mixed sizes and aspect ratios, a phone photo turned
by EXIF, grey, CMYK, RGBA and 16-bit images, a PNG called ``.jpg``, a file without a suffix, a
``.jfif``; and the junk real folders hold (``.ipynb_checkpoints``, ``__MACOSX``, ``@eaDir``,
AppleDouble ``._*``, ``Thumbs.db``, ``desktop.ini``, a symbolic-link loop, a text file, a HEIC
photo). Every path (the listing, the ImageFolder layout, the cache, the shards, the CSV layout)
reads the same classes and the same files, and the same pixels for each.
"""

from __future__ import annotations

import os
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from common.annotations import BadSampleError
from common.data import load_rgb
from common.fast.cache import CacheConfig, CachedImageDataset, ensure_cache
from common.images.checking import check_data
from common.images.layouts import csv_data, folder_data
from common.images.listing import FolderError, list_folder
from common.images.pixels import viewer_rgb
from common.images.splitting import split_csv, split_folder
from common.shards.format import decode_image, read_manifest, read_shard
from common.shards.make import convert_imagefolder
from common.shards.members import source_of
from tests.unit.your_images import MESSY_CLASSES, truncated_jpeg, write_messy_folder


@pytest.fixture(scope="module")
def messy(tmp_path_factory):
    root = tmp_path_factory.mktemp("messy") / "photos"
    return root, write_messy_folder(root)


def _copy(root: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(root, tmp_path / root.name, symlinks=True))


def _relative(samples, folder: Path) -> list[str]:
    return [os.path.relpath(path, folder) for path, _ in samples]


def test_the_listing_keeps_only_the_users_images_each_once_and_says_what_it_skipped(messy):
    root, expected = messy
    listing = list_folder(root / "train").refuse()
    assert listing.classes == MESSY_CLASSES  # NFC names, sorted; no .ipynb_checkpoints class
    assert _relative(listing.samples, root / "train") == expected["train"]
    assert {"PNG", "JPEG"} == set(listing.formats)  # png_named.jpg is a PNG, no_suffix too
    summary = listing.summary()
    assert "\n" not in summary and summary.startswith(f"{root / 'train'}: 33 images in 3 classes")
    for junk in (".ipynb_checkpoints x4", "__MACOSX x1", "@eaDir x3", "._* (AppleDouble) x3",
                 "Thumbs.db x3", "desktop.ini x1"):
        assert junk in summary, junk
    skipped = {os.path.relpath(entry.path, root / "train"): entry.reason for entry in listing.skipped}
    assert "HEIC image" in skipped["dog/IMG_0001.heic"]
    assert skipped["dog/notes.txt"].startswith("not an image")
    assert "symbolic-link loop" in skipped["dog/loop"]


def test_every_path_reads_the_same_samples_and_the_same_pixels(messy, tmp_path):
    root, expected = messy
    data = folder_data(root)
    train = data.dataset("train")
    assert data.classes == MESSY_CLASSES
    assert _relative(train.samples, root / "train") == expected["train"]
    shards = convert_imagefolder(root, tmp_path / "shards", shard_size=8, prefix="s")
    records = [record for shard in read_manifest(shards[0])
               for record in read_shard(shard.path)]
    assert [record.label for record in records] == train.targets
    cache = ensure_cache(train, tmp_path / "cache", CacheConfig(24, 24), verbose=False)
    cached = CachedImageDataset(cache.root)
    from common.fast.pipeline import DraftPilDecoder
    decoder = DraftPilDecoder(resize_size=24, crop_size=24, draft=False)
    for index, (path, label) in enumerate(train.samples):
        pixels = np.asarray(train[index][0])
        assert np.array_equal(pixels, np.asarray(decode_image(records[index]))), path
        assert cached[index][1] == label == records[index].label
        assert torch.equal(cached[index][0], decoder(path)), path
    members = {record.member.rsplit(".", 1)[1] for record in records}
    assert members == {"jpg", "png"}  # by content: png_named.jpg and no_suffix are PNG members
    key = records[5].key
    assert source_of(shards[0], records[5].shard, key).endswith(expected["train"][5])


def test_pixels_are_as_a_viewer_shows_them(messy):
    root, _ = messy
    cafe = root / "train" / unicodedata.normalize("NFD", "café")
    phone = np.asarray(load_rgb(cafe / "phone.jpg"))
    assert phone.shape == (40, 20, 3)  # stored 40x20, EXIF 6: shown upright
    assert phone[:6].mean() > 240 and phone[-6:].mean() < 200  # the white bar is now on top
    assert np.asarray(load_rgb(cafe / "phone.jpg", orientation="raw")).shape == (20, 40, 3)
    deep = np.asarray(load_rgb(cafe / "deep.png"))
    grey = np.asarray(load_rgb(cafe / "grey.png"))
    assert abs(int(deep[5, 5, 0]) - int(grey[5, 5, 0])) <= 1 < 255 - deep[5, 5, 0]  # scaled
    rgba = np.asarray(load_rgb(cafe / "rgba.png"))
    assert (rgba[2:, :12] == 255).all() and rgba[5, 20].tolist() == [200, 40, 40]  # on white
    floats = Image.fromarray(np.full((4, 4), 0.5, dtype=np.float32))
    assert np.asarray(viewer_rgb(floats)).tolist()[0][0] == [128, 128, 128]


def test_the_csv_layout_reads_the_same_images(messy, tmp_path):
    root, expected = messy
    rows = ["file_name,label"]
    for path, label in list_folder(root / "train").samples:
        rows.append(f"{os.path.relpath(path, root / 'train')},{MESSY_CLASSES[label]}")
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    data = csv_data(tmp_path / "train.csv", root / "train", tmp_path / "train.csv", root / "train")
    listing = list_folder(root / "train")
    assert data.classes == MESSY_CLASSES
    dataset = data.dataset("train")
    for index in range(len(dataset)):
        assert np.array_equal(np.asarray(dataset[index][0]),
                              np.asarray(load_rgb(listing.samples[index][0])))
    report = check_data(csv_splits={"train": (tmp_path / "train.csv", root / "train")})
    assert report.ok and sum(row.count for row in report.rows) == len(expected["train"])


def test_what_cannot_be_used_is_refused_naming_the_file(messy, tmp_path):
    root = _copy(messy[0], tmp_path) / "train"
    os.mkfifo(root / "dog" / "x.jpg")  # never opened: no hang
    bad_name = os.fsencode(root / "dog") + b"/\xb9\xb7.jpg"  # GBK bytes, not UTF-8
    Image.new("RGB", (8, 8)).save(bad_name.decode("utf-8", "surrogateescape"), "JPEG")
    (root / "Dog").mkdir()
    Image.new("RGB", (8, 8)).save(root / "Dog" / "a.jpg")
    (root / "dog" / "gone.jpg").symlink_to(root / "nowhere.jpg")
    with pytest.raises(FolderError) as refused:
        list_folder(root).refuse()
    message = str(refused.value)
    assert message.startswith(f"{root}: 4 problem(s)")
    assert f"{root / 'dog' / 'x.jpg'}: a FIFO, not a regular file" in message
    assert r"b'\xb9\xb7.jpg' is not UTF-8" in message
    assert "class folders 'Dog' and 'dog' differ only in case" in message
    assert f"{root / 'dog' / 'gone.jpg'}: a broken symbolic link" in message


def test_class_folders_in_two_unicode_forms_are_refused_naming_both(tmp_path):
    for name in (unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café"), "tea"):
        (tmp_path / name).mkdir()
        Image.new("RGB", (8, 8)).save(tmp_path / name / "a.png")
    listing = list_folder(tmp_path)
    assert len(listing.problems) == 1 and "Unicode form" in listing.problems[0].reason


def test_the_check_finds_every_problem_at_once(messy, tmp_path):
    root = _copy(messy[0], tmp_path)
    truncated_jpeg(root / "train" / "dog" / "cut.jpg")
    shutil.copy(root / "train" / "dog" / "img_0.jpg", root / "val" / "dog" / "again.jpg")
    shutil.copy(root / "train" / "dog" / "img_1.jpg", root / "train" / "猫" / "img_1.jpg.jpg")
    report = check_data(root)
    assert not report.ok and len(report.problems) == 3, report.problems
    assert any(f"{root / 'train' / 'dog' / 'cut.jpg'}" in p and "truncated" in p
               for p in report.problems)
    assert any("in both splits" in p for p in report.problems)
    assert any("in two classes" in p for p in report.problems)
    table = report.table()
    assert "train  dog" in table and "I;16" in table and "CMYK" in table


def test_a_damaged_jpeg_is_found_by_the_check(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        rng = np.random.default_rng(0 if name == "a" else 1)
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(
            tmp_path / name / "x.jpg")
    data = bytearray((tmp_path / "a" / "x.jpg").read_bytes())
    data[len(data) // 2:len(data) // 2 + 40] = b"\xaa" * 40  # a damaged middle: PIL is silent
    (tmp_path / "a" / "x.jpg").write_bytes(bytes(data))
    load_rgb(tmp_path / "a" / "x.jpg")  # decodes without a word
    report = check_data(tmp_path)
    assert len(report.problems) == 1 and "a damaged JPEG" in report.problems[0]
    assert str(tmp_path / "a" / "x.jpg") in report.problems[0]


def test_a_split_is_stratified_seeded_and_keeps_copies_together(messy, tmp_path):
    source = _copy(messy[0], tmp_path) / "train"
    shutil.copy(source / "dog" / "img_0.jpg", source / "dog" / "img_0 copy.jpg")
    first = split_folder(source, tmp_path / "one", val_fraction=0.25, seed=3)
    split_folder(source, tmp_path / "two", val_fraction=0.25, seed=3)
    assert first["train"] + first["val"] == 34 and first["val"] == 3 * 3
    listed = {name: sorted(_relative(list_folder(tmp_path / name / "val").samples,
                                     tmp_path / name / "val")) for name in ("one", "two")}
    assert listed["one"] == listed["two"]  # seeded
    sides = {side for side in ("train", "val")
             for name in ("img_0.jpg", "img_0 copy.jpg") if (tmp_path / "one" / side / "dog" / name).exists()}
    assert len(sides) == 1  # the same bytes on one side only
    assert list_folder(tmp_path / "one" / "train").classes == MESSY_CLASSES
    assert (tmp_path / "one" / "train" / "café").is_dir()  # NFC on the way out
    shutil.copy(source / "dog" / "img_1.jpg", source / "猫" / "stray.jpg")
    with pytest.raises(BadSampleError, match=r"the same bytes under two classes: .*stray.jpg"):
        split_folder(source, tmp_path / "three")


def test_a_labels_csv_is_split_in_two(messy, tmp_path):
    root = messy[0] / "train"
    rows = ["file_name,label"] + [f"{os.path.relpath(path, root)},{MESSY_CLASSES[label]}"
                                  for path, label in list_folder(root).samples]
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    counts = split_csv(tmp_path / "labels.csv", root, tmp_path / "out", val_fraction=0.25)
    assert counts == {"train": 24, "val": 9}
    data = csv_data(tmp_path / "out" / "train.csv", root, tmp_path / "out" / "val.csv", root)
    assert data.classes == MESSY_CLASSES and len(data.dataset("val")) == 9


def test_resize_and_normalize_are_the_same_on_the_decode_and_cache_paths(messy, tmp_path):
    from common.ddp.config import parse_config
    from common.ddp.normalization import run_statistics
    from common.fast.pipeline import DraftPilDecoder
    from common.images.layouts import resolve_data
    from common.transforms import V2EvalPreset

    root = _copy(messy[0], tmp_path)
    config = parse_config(["--data", str(root), "--resize", "pad", "--image-size", "16"])
    data = resolve_data(config)
    assert data.pixels == {"resize": "pad"} and data.cache_root.name.endswith("-pad")
    train = data.dataset("train")
    panorama = next(i for i, (path, _) in enumerate(train.samples) if path.endswith("dog/img_2.jpg"))
    padded = np.asarray(train[panorama][0])
    assert padded.shape == (70, 70, 3) and (padded[:15] == 0).all()  # 70x30 on black: whole
    decoder = DraftPilDecoder(resize_size=16, crop_size=16, draft=False, **data.pixels)
    preset = V2EvalPreset(resize_size=16, crop_size=16, mean=(0, 0, 0), std=(1, 1, 1))
    for index in range(0, len(train), 5):
        decoded = (preset(train[index][0]) * 255).round()
        assert (decoded - decoder(train.samples[index][0]).float()).abs().max() <= 2
    stats = run_statistics(config, data)  # auto, no --weights: the data's own
    assert stats["normalize"] == "dataset" and stats["mean"] != (0.485, 0.456, 0.406)
    stored = data.cache_root / "statistics_16.json"
    assert stored.is_file() and run_statistics(config, data) == stats  # read back
    weights = tmp_path / "w.pt"
    torch.save({}, weights)
    tuned = parse_config(["--data", str(root), "--weights", str(weights)])
    assert run_statistics(tuned, resolve_data(tuned))["normalize"] == "imagenet"
    for flag, value in (("--resize", "stretch"), ("--normalize", "mine"), ("--orientation", "up")):
        with pytest.raises(SystemExit):
            parse_config(["--data", str(root), flag, value])


def test_torchvision_imagenet_weights_fine_tune_with_a_new_head(tmp_path, capsys):
    from common.models import create_model, load_weights

    pretrained = create_model("resnet18", 1000)  # as torchvision's ImageNet weights are shaped
    torch.save(pretrained.state_dict(), tmp_path / "resnet18.pt")
    model = load_weights(create_model("resnet18", 3), tmp_path / "resnet18.pt")
    assert torch.equal(model.conv1.weight, pretrained.conv1.weight)
    assert model.fc.weight.shape == (3, 512)
    assert "starts anew for 3 classes (fine-tuning)" in capsys.readouterr().out
    torch.save(create_model("resnet18", 10).state_dict(), tmp_path / "ten.pt")
    with pytest.raises(ValueError, match=r"fc.weight is \(10, 512\) in the file"):
        load_weights(create_model("resnet18", 3), tmp_path / "ten.pt")  # not ImageNet's: refused


def test_a_collective_that_lost_its_peer_is_told_apart():
    from common.ddp.process_group import peer_failed

    lost = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
                        "[127.0.0.1]:42: Connection closed by peer")
    assert peer_failed(lost) and not peer_failed(RuntimeError("CUDA out of memory"))


def test_link_or_copy_links_and_copies_across_disks(tmp_path, monkeypatch):
    import errno

    from common.images import splitting
    from common.images.splitting import link_or_copy

    source = tmp_path / "a.jpg"
    source.write_bytes(b"\xff\xd8 photo")
    assert link_or_copy(source, tmp_path / "linked" / "a.jpg") == "link"
    assert (tmp_path / "linked" / "a.jpg").stat().st_ino == source.stat().st_ino

    def other_disk(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(splitting.os, "link", other_disk)
    assert link_or_copy(source, tmp_path / "copied" / "a.jpg") == "copy"
    copied = tmp_path / "copied" / "a.jpg"
    assert copied.read_bytes() == source.read_bytes() and copied.stat().st_ino != source.stat().st_ino
