"""common.shards.peers and common.shards.sample_costs in-process: what they time is the same data.

The whole runs (a process per reader) are in tests/system/test_benchmark_costs.py.
"""

from __future__ import annotations

import importlib.util

import pytest

from common.shards import peers


@pytest.fixture(scope="module")
def quick(tmp_path_factory, tiny_data):
    return peers.PeersConfig(out=tmp_path_factory.mktemp("peers"), data_root=tiny_data.root,
                             num_images=12, image_size=16, repeats=1, quick=True)


def test_every_reader_decodes_the_same_tensors(quick):
    names = ["shards", "decode_only"] + (["webdataset"] if importlib.util.find_spec("webdataset")
                                         else [])
    results = {}
    for name in names:
        quick.child = name
        results[name] = peers.child(quick)
    assert {r["digest"] for r in results.values()} == {results["shards"]["digest"]}
    assert {r["samples"] for r in results.values()} == {12}
    assert all(r["read_decode_us"] > 0 for r in results.values())


def test_an_unknown_reader_is_refused(quick):
    with pytest.raises(ValueError, match="unknown reader 'tfrecord'"):
        peers.reader("tfrecord", quick, [])
