"""Tests for data_scripts/make_shards.py: the CSV + images -> tar shards converter."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from common.data import CustomImageDataset
from common.shards.format import file_sha256, read_shard
from tests.helpers import load_make_shards


def _convert(tiny_data, out: Path, shard_size: int) -> dict:
    load_make_shards().main(["--csv", str(tiny_data.labels_csv("train")), "--images",
                             str(tiny_data.images_dir("train")), "--out", str(out),
                             "--shard-size", str(shard_size)])
    return json.loads((out / "manifest.json").read_text())


def test_manifest_counts_and_checksums(tiny_data, tmp_path):
    manifest = _convert(tiny_data, tmp_path, shard_size=5)
    assert [s["num_samples"] for s in manifest["shards"]] == [5, 5, 5, 5, 4]
    assert manifest["num_samples"] == 24
    for shard in manifest["shards"]:
        path = tmp_path / shard["name"]
        assert shard["sha256"] == file_sha256(path)
        assert shard["num_bytes"] == path.stat().st_size


def test_members_follow_the_webdataset_convention(tiny_data, tmp_path):
    manifest = _convert(tiny_data, tmp_path, shard_size=7)
    source = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))
    with tarfile.open(tmp_path / manifest["shards"][1]["name"]) as tar:
        members = tar.getmembers()
    assert [m.name for m in members[:4]] == ["00000007.jpg", "00000007.cls",
                                            "00000008.jpg", "00000008.cls"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode, m.type) for m in members} == \
        {(0, 0, 0, "", "", 0o644, tarfile.REGTYPE)}
    records = list(read_shard(tmp_path / manifest["shards"][1]["name"]))
    for offset, record in enumerate(records):
        assert record.data == source.path(7 + offset).read_bytes()  # original bytes
        assert record.label == source.labels[7 + offset]


def test_output_is_deterministic(tiny_data, tmp_path):
    _convert(tiny_data, tmp_path / "a", shard_size=6)
    _convert(tiny_data, tmp_path / "b", shard_size=6)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert len(files) == 5  # 4 shards + manifest
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
