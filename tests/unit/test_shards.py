"""Tests for common/shards.py: exactly-once splitting, equal batches, shuffling, safe reading."""

from __future__ import annotations

import importlib.util
import io
import tarfile
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.functional import pil_to_tensor

from common.data import CustomImageDataset, load_rgb
from common.fast.pipeline import BatchNormalize, TorchvisionDecoder
from common.shards import (
    ShardedImageDataset,
    ShardError,
    ShardInfo,
    ensure_shards,
    read_manifest,
    read_shard,
    split_shards,
    worker_quotas,
    write_shards,
)
from common.shards import dataset as shard_dataset
from common.shards.keys import shard_keys
from common.transforms import ClassicEvalPreset
from tests.helpers import (
    add_member,
    copy_shards,
    copy_with_manifest,
    pixel_hash,
    repack,
    with_extra_shard,
)
from tests.system_parts import require
from tests.unit.test_data import png_header


@pytest.fixture(scope="module")
def source(tiny_data):
    return CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))


@pytest.fixture(scope="module")
def uneven(source, tmp_path_factory):
    """24 samples in shards of 5, 5, 5, 5, 4: uneven, and fewer than 3 x 2 consumers."""
    samples = [(source.path(i), int(source.labels[i])) for i in range(len(source))]
    return write_shards(samples, tmp_path_factory.mktemp("uneven"), shard_size=5)


@pytest.fixture(scope="module")
def source_multiset(source):
    return Counter((pixel_hash(load_rgb(source.path(i))), int(source.labels[i]))
                   for i in range(len(source)))


def test_shuffle_false_keeps_the_written_order(uneven, source):
    dataset = ShardedImageDataset(uneven, shuffle=False, equalize="none")
    assert [r.key for r in dataset.records()] == [f"{i:08d}" for i in range(len(source))]
    assert [r.label for r in dataset.records()] == source.labels.tolist()


def test_same_transform_same_tensor_as_map_style(tiny_data, uneven):
    preset = ClassicEvalPreset(resize_size=24, crop_size=20)
    mapped = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"),
                                transform=preset)
    streamed = ShardedImageDataset(uneven, preset, shuffle=False, equalize="none")
    for index, (image, label) in enumerate(streamed):
        expected, expected_label = mapped[index]
        assert torch.equal(image, expected) and label == expected_label


def test_split_shards_rank_then_worker():
    plan = split_shards(list(range(8)), world_size=2, num_workers=2)
    assert plan == [[[0, 4], [2, 6]], [[1, 5], [3, 7]]]
    assert split_shards([4, 1, 0], world_size=1, num_workers=0) == [[[4, 1, 0]]]


def test_worker_quotas_policies():
    counts = np.array([[10, 5], [8, 7]])
    assert worker_quotas(counts, "pad").tolist() == [[10, 7], [10, 7]]
    assert worker_quotas(counts, "drop").tolist() == [[8, 5], [8, 5]]
    assert worker_quotas(counts, "none").tolist() == counts.tolist()
    with pytest.raises(ValueError, match="cannot pad"):
        worker_quotas(np.array([[3, 0], [4, 2]]), "pad")
    with pytest.raises(ValueError, match="policy"):
        worker_quotas(counts, "repeat")


def test_too_few_shards_for_ranks_is_refused(uneven):
    with pytest.raises(ValueError, match="5 shards cannot feed 6 ranks"):
        ShardedImageDataset(uneven, rank=0, world_size=6)
    with pytest.raises(ValueError, match="rank 2 is outside"):
        ShardedImageDataset(uneven, rank=2, world_size=2)


@pytest.mark.parametrize(("where", "member"), [("data", "00000001.jpg"), ("half", None)])
def test_truncated_shard_names_shard_and_member(uneven, tmp_path, where, member):
    first = copy_shards(uneven, tmp_path)
    with tarfile.open(first) as tar:
        members = tar.getmembers()
    cut = members[2].offset_data + 100 if where == "data" else first.stat().st_size // 2
    first.write_bytes(first.read_bytes()[:cut])
    # the member being read when the data ran out (for "half": wherever that falls)
    member = member or [m.name for m in members if m.offset_data <= cut][-1]
    dataset = ShardedImageDataset(tmp_path, shuffle=False, verify=False, equalize="none")
    with pytest.raises(ShardError, match=rf"shard-000000\.tar: cannot read member '{member}' "
                                         r"\(truncated or corrupt tar\)"):
        list(dataset.records())
    with pytest.raises(ShardError, match=r"shard-000000\.tar: sha256 mismatch"):
        ShardedImageDataset(tmp_path)


def test_checksum_mismatch_is_refused(uneven, tmp_path):
    first = copy_shards(uneven, tmp_path)
    data = bytearray(first.read_bytes())
    data[2000] ^= 0xFF  # same size, one byte changed inside the first image
    first.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=r"shard-000000\.tar: sha256 mismatch"):
        ShardedImageDataset(tmp_path)


def test_shard_shorter_than_manifest_is_refused(uneven, tmp_path):
    first = copy_shards(uneven, tmp_path)
    members = list(read_shard(first))[:3]
    with tarfile.open(first, "w") as tar:
        for record in members:
            add_member(tar, record.member, record.data)
            add_member(tar, f"{record.key}.cls", str(record.label).encode())
    with pytest.raises(ShardError, match="holds 3 samples but the manifest says 5"):
        list(read_shard(first, expected=5))


def _shard(tmp_path, members) -> ShardInfo:
    path = tmp_path / "crafted.tar"
    with tarfile.open(path, "w") as tar:
        for name, data, *kind in members:
            add_member(tar, name, data, *kind)
    return ShardInfo(path, 1)


@pytest.mark.parametrize(("members", "message"), [
    ([("../evil.jpg", b"x"), ("../evil.cls", b"0")], r"member '\.\./evil\.jpg' has an unsafe path"),
    ([("/abs.jpg", b"x"), ("/abs.cls", b"0")], r"member '/abs\.jpg' has an unsafe path"),
    ([("a.jpg", b"", tarfile.SYMTYPE), ("a.cls", b"0")], r"member 'a\.jpg' is not a regular"),
    ([("a.jpg", b"x")], r"sample 'a' has members \['jpg'\]"),
    ([("a.jpg", b"x"), ("a.cls", b"cat")], r"member a\.cls: label 'cat'"),
    ([("a.jpg", b"x"), ("a.cls", b"1"), ("a.txt", b"")], r"members \['cls', 'jpg', 'txt'\]"),
    ([("a.jpg", b"x"), ("a.cls", b"1"), ("b.jpg", b"x"), ("b.cls", b"1"),
      ("a.jpg", b"x")], r"repeats sample 'a'"),
])
def test_unsafe_or_malformed_members_are_named(tmp_path, members, message):
    dataset = ShardedImageDataset([_shard(tmp_path, members)], equalize="none")
    with pytest.raises(ShardError, match=message) as error:
        list(dataset)
    assert "crafted.tar" in str(error.value)


def test_corrupt_image_names_shard_and_member(tmp_path):
    dataset = ShardedImageDataset([_shard(tmp_path, [("k.jpg", b"not a jpeg"), ("k.cls", b"2")])])
    with pytest.raises(ShardError, match=r"crafted\.tar: member k\.jpg: cannot decode"):
        next(iter(dataset))


def test_webdataset_reads_the_same_shards(uneven, source_multiset):
    require("webdataset", None if importlib.util.find_spec("webdataset") else
            "the webdataset package is not installed: pip install -e .[shards] (make install installs it)")
    import webdataset as wds
    urls = [str(shard.path) for shard in read_manifest(uneven)]
    pipeline = wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls")
    seen = Counter((pixel_hash(image.convert("RGB")), int(label)) for image, label in pipeline)
    assert seen == source_multiset


def test_ensure_shards_rewrites_only_when_needed(source, tmp_path):
    samples = [(source.path(i), int(source.labels[i])) for i in range(len(source))]
    manifest = ensure_shards(samples, tmp_path, shard_size=10)
    first = read_manifest(manifest)[0].path
    before = first.stat().st_mtime_ns
    assert ensure_shards(samples, tmp_path, shard_size=10) == manifest
    assert first.stat().st_mtime_ns == before  # intact: left alone
    first.write_bytes(b"damaged")
    ensure_shards(samples, tmp_path, shard_size=10)
    assert len(list(read_shard(first))) == 10  # damaged: rewritten
    (tmp_path / "manifest.json").write_text('{"shards": 3}')
    ensure_shards(samples, tmp_path, shard_size=10)
    assert len(read_manifest(tmp_path)) == 3  # a damaged manifest: rewritten
    relabelled = [(path, (label + 1) % 6) for path, label in samples]
    ensure_shards(relabelled, tmp_path, shard_size=10)
    assert [r.label for r in read_shard(first)] == [label for _, label in relabelled[:10]]


# --- lying manifests, hostile members, bounded memory ------------------------------------

@pytest.mark.parametrize("policy", ["none", "pad", "drop"])
def test_a_last_shard_holding_more_than_the_manifest_says_is_refused(uneven, tmp_path, policy):
    def under_count(manifest):
        manifest["shards"][-1]["num_samples"] = 2  # it holds 4
        manifest["num_samples"] = 22

    copy_with_manifest(uneven, tmp_path, under_count)
    dataset = ShardedImageDataset(tmp_path, shuffle=False, equalize=policy, buffer_size=0)
    with pytest.raises(ShardError, match=r"shard-000004\.tar: holds 4 samples but the manifest "
                                         "says 2"):
        list(dataset.records())


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m["shards"][-1].update(num_samples=2),
     "num_samples is 24 but the shards' counts add up to 22"),
    (lambda m: m["shards"].append(dict(m["shards"][0])), r"shard-000000\.tar is listed twice"),
    (lambda m: m["shards"][1].pop("sha256"), r"shard entry 1 \(shard-000001\.tar\) has no valid "
                                             "sha256"),
    (lambda m: m["shards"].__setitem__(2, "shard-000002.tar"),
     "shard entry 2 must be an object with name, num_samples, sha256"),
    (lambda m: m.update(shards=5), "'shards' must be a list of entries, got int 5"),
    (lambda m: m.update(classes="circle"), "'classes' must be a list of names"),
])
def test_malformed_manifests_name_manifest_and_entry(uneven, tmp_path, edit, message):
    copy_with_manifest(uneven, tmp_path, edit)
    with pytest.raises(ShardError, match=message) as error:
        read_manifest(tmp_path)
    assert "manifest.json" in str(error.value)


def test_the_same_shard_under_two_names_is_refused(uneven, tmp_path):
    def copied(manifest):
        manifest["shards"].append({**manifest["shards"][0], "name": "copy.tar"})
        manifest["num_samples"] += 5

    copy_with_manifest(uneven, tmp_path, copied)
    (tmp_path / "copy.tar").write_bytes((tmp_path / "shard-000000.tar").read_bytes())
    with pytest.raises(ShardError, match=r"copy\.tar has the same sha256 as entry 0 "
                                         r"\(shard-000000\.tar\)"):
        read_manifest(tmp_path)
    # Re-packed (other bytes, same keys) under another name: the keys in the headers tell.
    shards = read_manifest(uneven)
    repacked = repack(shards[0].path, tmp_path / "repacked.tar")
    with pytest.raises(ShardError, match=r"sample key '00000000' is in shard .*shard-000000\.tar "
                                         r"and again in shard .*repacked\.tar"):
        ShardedImageDataset([*shards, ShardInfo(repacked, 5)], shuffle=False, equalize="none")
    # Not verified at construction: the reader still sees the repeated first key.
    dataset = ShardedImageDataset([*shards, ShardInfo(repacked, 5)], shuffle=False,
                                  equalize="none", verify=False)
    with pytest.raises(ShardError, match=r"repacked\.tar: key '00000000' was already read from "
                                         r"shard shard-000000\.tar"):
        list(dataset.records())


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_repacked_copy_added_as_a_sixth_shard_is_refused(uneven, tmp_path, world_size):
    extra = repack(read_manifest(uneven)[0].path, tmp_path / "shard-000005.tar")
    with_extra_shard(uneven, tmp_path, extra)
    assert len(read_manifest(tmp_path)) == 6  # every per-shard check passes
    for rank in range(world_size):
        with pytest.raises(ShardError, match=rf"sample key '00000000' is in shard "
                                             rf"{tmp_path}/shard-000000\.tar and again in shard "
                                             rf"{tmp_path}/shard-000005\.tar"):
            ShardedImageDataset(tmp_path, rank=rank, world_size=world_size)


def test_a_shard_repeating_samples_of_others_is_refused_unless_allowed(uneven, tmp_path):
    # Samples 3-7: the last two of shard 0 and the first three of shard 1, under their keys.
    shards = read_manifest(uneven)
    extra = tmp_path / "extra.tar"
    with tarfile.open(extra, "w") as tar:
        for record in [*list(read_shard(shards[0].path))[3:],
                       *list(read_shard(shards[1].path))[:3]]:
            add_member(tar, record.member, record.data)
            add_member(tar, f"{record.key}.cls", str(record.label).encode())
    with_extra_shard(uneven, tmp_path, extra)
    with pytest.raises(ShardError, match=r"sample key '00000003' is in shard .*shard-000000\.tar "
                                         r"and again in shard .*extra\.tar.*--allow-duplicate-keys"):
        ShardedImageDataset(tmp_path, shuffle=False, equalize="none")
    dataset = ShardedImageDataset(tmp_path, shuffle=False, equalize="none",
                                  allow_duplicate_keys=True)  # oversampling, on purpose
    keys = Counter(record.key for record in dataset.records())
    assert sum(keys.values()) == 29
    assert sorted(key for key, count in keys.items() if count == 2) == [f"{i:08d}"
                                                                         for i in range(3, 8)]


def test_shard_keys_reads_the_tar_headers_only(uneven, monkeypatch):
    shard = read_manifest(uneven)[0].path
    read = []

    class Counting(io.FileIO):
        def read(self, size=-1):
            data = super().read(size)
            read.append(len(data))
            return data

    monkeypatch.setattr(tarfile, "bltn_open", lambda name, mode: Counting(name, mode.strip("b")))
    assert shard_keys(shard) == {f"{i:08d}" for i in range(5)}
    members = 10  # 5 samples x (.jpg, .cls)
    assert 0 < sum(read) <= (members + 2) * (tarfile.BLOCKSIZE + 1) < shard.stat().st_size / 2


def test_labels_are_checked_against_the_classes(tmp_path):
    crafted = _shard(tmp_path, [("a.jpg", b"x"), ("a.cls", b"7")])
    with pytest.raises(ShardError, match=r"member a\.cls: label 7 is out of range \(0\.\.5, the "
                                         "manifest's classes\\)"):
        list(read_shard(crafted.path, num_classes=6))
    crafted = _shard(tmp_path, [("a.jpg", b"x"), ("a.cls", b"1" * 30)])
    with pytest.raises(ShardError, match=r"label 1{30} is out of range \(int64\)"):
        list(read_shard(crafted.path))


def test_manifest_classes_bound_the_labels(source, tmp_path):
    samples = [(source.path(i), 9 if i == 3 else int(source.labels[i])) for i in range(8)]
    write_shards(samples, tmp_path, shard_size=4, classes=["a", "b", "c", "d", "e", "f"])
    with pytest.raises(ShardError, match=r"member 00000003\.cls: label 9 is out of range"):
        list(ShardedImageDataset(tmp_path, shuffle=False, equalize="none").records())


def _raw_member(name: str, *, size: int, data: bytes = b"", sparse_size: int | None = None) -> bytes:
    """One tar header (+ data) written by hand: GNU sparse, or claiming any size."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = tarfile.GNUTYPE_SPARSE if sparse_size else tarfile.REGTYPE
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    if sparse_size:  # one data region of `size` bytes at offset 0, then a hole
        header[386:398] = tarfile.itn(0, 12, tarfile.GNU_FORMAT)
        header[398:410] = tarfile.itn(size, 12, tarfile.GNU_FORMAT)
        header[482] = 0
        header[483:495] = tarfile.itn(sparse_size, 12, tarfile.GNU_FORMAT)
        header[148:156] = b" " * 8
        header[148:156] = b"%06o\0 " % sum(header)
    padding = b"\0" * (-len(data) % tarfile.BLOCKSIZE)
    return bytes(header) + data + padding


@pytest.mark.parametrize(("member", "message"), [
    (_raw_member("a.jpg", size=1, data=b"x", sparse_size=8 * 2**20),
     r"member 'a\.jpg' is a sparse file"),
    (_raw_member("a.jpg", size=2**40), r"member 'a\.jpg' claims 1,099,511,627,776 bytes, over "
                                       r"the limit of 67,108,864"),
])
def test_sparse_and_oversized_members_are_refused_before_reading(tmp_path, member, message):
    path = tmp_path / "hostile.tar"
    path.write_bytes(member + b"\0" * 2 * tarfile.BLOCKSIZE)
    with pytest.raises(ShardError, match=message):
        list(read_shard(path))


def test_the_shuffle_buffer_is_bounded_in_bytes(uneven):
    dataset = ShardedImageDataset(uneven, buffer_size=16, max_buffer_bytes=10_000)
    with pytest.raises(ShardError, match=r"the shuffle buffer would hold [\d,]+ bytes in \d+ "
                                         r"samples, over max_buffer_bytes=10,000"):
        list(dataset.records())
    assert len(list(ShardedImageDataset(uneven, buffer_size=16).records())) == 24


def test_equalize_none_under_a_process_group_is_refused(uneven, monkeypatch):
    monkeypatch.setattr(shard_dataset.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(shard_dataset.dist, "get_world_size", lambda *args: 2)
    monkeypatch.setattr(shard_dataset.dist, "get_rank", lambda *args: 0)
    with pytest.raises(ValueError, match="equalize='none' with a process group of 2 ranks"):
        ShardedImageDataset(uneven, equalize="none")
    ShardedImageDataset(uneven, equalize="none", allow_uneven=True)  # evaluation, knowingly
    ShardedImageDataset(uneven, equalize="none", rank=0, world_size=1)  # every rank reads all
    assert ShardedImageDataset(uneven).world_size == 2


def test_a_huge_image_in_a_shard_names_shard_and_member(tmp_path):
    bomb = png_header(tmp_path / "bomb.png", 20000, 20000).read_bytes()
    dataset = ShardedImageDataset([_shard(tmp_path, [("k.png", bomb), ("k.cls", b"2")])])
    with pytest.raises(ShardError, match=r"crafted\.tar: member k\.png: cannot decode image: "
                                         r".*400000000 pixels"):
        next(iter(dataset))
    small = _shard(tmp_path, [("k.jpg", _jpeg(32, 32)), ("k.cls", b"2")])
    with pytest.raises(ShardError, match=r"member k\.jpg: cannot decode image: 32x32 = 1,024 "
                                         r"pixels is over the limit of 1,000"):
        next(iter(ShardedImageDataset([small], max_pixels=1000)))


def _jpeg(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height)).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_uint8_decode_matches_the_torchvision_decoder(source, uneven):
    geometry = v2.Compose([v2.Resize(24, antialias=True), v2.CenterCrop(20)])
    streamed = ShardedImageDataset(uneven, geometry, shuffle=False, equalize="none")
    assert streamed.uint8  # a v2 transform: decode_jpeg to uint8 tensors
    decoder = TorchvisionDecoder(resize_size=24, crop_size=20)
    guide = CustomImageDataset(source.annotations_file, source.img_dir,
                               ClassicEvalPreset(resize_size=24, crop_size=20))
    for index, (image, label) in enumerate(streamed):
        assert image.dtype == torch.uint8 and image.shape == (3, 20, 20)
        assert torch.equal(image, decoder(source.path(index)))
        assert label == int(source.labels[index])
        # normalized last, within two uint8 levels of the guide's PIL pipeline
        difference = (BatchNormalize()(image[None])[0] - guide[index][0]).abs().max()
        assert difference <= 2 / 255 / 0.224


def test_decode_modes_choose_pil_or_uint8(uneven):
    assert not ShardedImageDataset(uneven, ClassicEvalPreset(resize_size=16, crop_size=16)).uint8
    assert not ShardedImageDataset(uneven).uint8
    image, _ = next(iter(ShardedImageDataset(uneven, decode="uint8", shuffle=False)))
    pil_image, _ = next(iter(ShardedImageDataset(uneven, decode="pil", shuffle=False)))
    assert torch.equal(image, pil_to_tensor(pil_image))  # same libjpeg-turbo, same pixels
    with pytest.raises(ValueError, match="decode must be one of"):
        ShardedImageDataset(uneven, decode="fast")


def test_png_member_falls_back_to_pil(tmp_path):
    buffer = io.BytesIO()
    Image.new("RGB", (6, 4), (10, 20, 30)).save(buffer, format="PNG")
    dataset = ShardedImageDataset([_shard(tmp_path, [("k.png", buffer.getvalue()),
                                                      ("k.cls", b"2")])], decode="uint8")
    image, label = next(iter(dataset))
    assert image.shape == (3, 4, 6) and image[:, 0, 0].tolist() == [10, 20, 30] and label == 2
