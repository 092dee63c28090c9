"""The time-to-first-step benchmark's reading of a launch and its table (no process started)."""

from __future__ import annotations

import json

import pytest

from common.ddp.first_step import (
    BASELINE,
    FirstStepConfig,
    commands,
    first_step_record,
    summarize,
)


def test_the_first_first_step_record_is_read_among_other_lines():
    stdout = "\n".join(["rank 0: using the CPU", json.dumps({"event": "start", "time": 5.0}),
                        '{"note": "first_step is not an event here", "time": 6.0}',
                        json.dumps({"event": "first_step", "attempt": 0, "time": 7.25, "step": 1,
                                    "cpu_s": 4.5}),
                        json.dumps({"event": "first_step", "time": 9.0, "cpu_s": 6.0})])
    assert first_step_record(stdout) == (7.25, 4.5)


def test_a_launch_without_a_first_step_record_is_refused_naming_it():
    with pytest.raises(ValueError, match="examples printed no first_step record"):
        first_step_record(json.dumps({"event": "done", "time": 3.0}), "examples")


def test_the_table_has_medians_extremes_and_ratios_to_examples():
    table = summarize({"train": [(9.0, 5.0, 20.0), (7.0, 4.0, 18.0), (8.0, 6.0, 30.0)],
                       BASELINE: [(10.0, 4.0, 24.0), (12.0, 5.0, 20.0), (8.0, 4.0, 22.0)]}
                      ).set_index("trainer")
    assert table.loc["train", ["median_s", "min_s", "max_s", "rank0_cpu_s", "launch_cpu_s"]
                     ].tolist() == [8, 7, 9, 5, 20]
    assert table.loc["train", "vs_examples"] == pytest.approx(0.8)
    assert table.loc["train", "rank0_cpu_vs_examples"] == pytest.approx(1.25)
    assert table.loc[BASELINE, ["vs_examples", "rank0_cpu_vs_examples"]].tolist() == [1.0, 1.0]


def test_both_launches_do_the_same_work_on_the_same_folder(tmp_path):
    launches = commands(FirstStepConfig(ranks=2, batch_size=64, image_size=32), tmp_path)
    train, examples = launches["train"], launches[BASELINE]
    assert "--nproc-per-node=2" in train and "--nproc-per-node=2" in examples
    assert train[train.index("--data") + 1] == str(tmp_path) and str(tmp_path) in examples
    assert train[train.index("--batch-size") + 1] == "64"  # global: 32 per rank
    assert examples[examples.index("-b") + 1] == "32"  # examples' -b is per process
    for flags in (train, examples):
        assert "resnet18" in flags and "32" in flags and flags[flags.index("--max-steps") + 1] == "1"
    assert train[train.index("--num-workers") + 1] == examples[examples.index("-j") + 1] == "0"
