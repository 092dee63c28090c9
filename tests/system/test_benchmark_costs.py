"""The per-sample CPU cost table and the peers' table, run whole on tiny data."""

from __future__ import annotations

import pandas as pd

from common.shards import peers, sample_costs


def test_sample_costs_has_every_trainer_beside_examples(tiny_data, tmp_path, capsys):
    assert sample_costs.main(["--quick", "--data-root", str(tiny_data.root), "--out",
                              str(tmp_path), "--repeats", "1"]) == 0
    table = pd.read_csv(tmp_path / "sample_costs.csv").set_index("pipeline")
    for name in ("examples", "ddp_decode", "ddp_cache", "shards", "v2_+colour_jitter",
                 "seeded_cropflip"):
        assert table.loc[name, "cpu_us_per_sample"] > 0, name
    assert table.loc["examples", "vs_examples"] == 1.0
    assert "CPU seconds per sample" in capsys.readouterr().out


def test_peers_run_each_reader_in_a_process_and_agree(tiny_data, tmp_path, capsys):
    assert peers.main(["--quick", "--data-root", str(tiny_data.root), "--out", str(tmp_path),
                       "--repeats", "1", "--num-images", "12"]) == 0
    table = pd.read_csv(tmp_path / "peers.csv").set_index("reader")
    assert {"shards", "decode_only"} <= set(table.index)
    assert table["digest"].nunique() == 1  # the same tensors from every reader
    assert table.loc["shards", "total_vs_shards"] == 1.0
