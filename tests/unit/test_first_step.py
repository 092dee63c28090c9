"""The time-to-first-step benchmark's reading of a launch and its table (no process started)."""

from __future__ import annotations

import json
import sys

import pytest

from common.ddp import first_step_rank
from common.ddp.first_step import (
    BASELINE,
    RANK_WRAPPER,
    ROUND,
    FirstStepConfig,
    commands,
    first_step_record,
    libraries_record,
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


def test_libraries_first_wraps_each_launch_around_the_same_module_and_flags(tmp_path):
    plain = commands(FirstStepConfig(), tmp_path)
    wrapped = commands(FirstStepConfig(libraries_first=True), tmp_path)
    for name, module in (("train", "common.ddp.train"), (BASELINE, "common.ddp.examples_main")):
        start = plain[name].index(module)
        assert wrapped[name][:start] == plain[name][:start]  # the same torchrun, the same ranks
        assert wrapped[name][start:] == [RANK_WRAPPER, *plain[name][start:]]


def test_the_libraries_record_is_read_and_its_absence_named():
    stdout = "\n".join(["Using device: cpu", json.dumps({"event": "libraries", "libraries_cpu_s": 2.5,
                                                         "imports_cpu_s": 0.02})])
    assert libraries_record(stdout) == (2.5, 0.02)
    with pytest.raises(ValueError, match="train printed no libraries record"):
        libraries_record(json.dumps({"event": "first_step", "time": 1.0, "cpu_s": 3.0}), "train")


def test_libraries_first_rounds_add_their_medians_to_the_table():
    table = summarize({"train": [(5.0, 3.0, 10.0, 2.5, 0.02, 0.48), (6.0, 3.4, 11.0, 2.7, 0.03, 0.67),
                                 (4.0, 2.9, 9.0, 2.4, 0.02, 0.48)],
                       BASELINE: [(5.0, 3.0, 10.0, 2.5, 0.0, 0.5)] * 3}).set_index("trainer")
    assert table.loc["train", list(ROUND[3:])].tolist() == [2.5, 0.02, 0.48]
    assert "libraries_cpu_s" not in summarize({"train": [(1.0, 1.0, 1.0)], BASELINE: [(1.0, 1.0, 1.0)]})


def test_a_rank_imports_the_libraries_then_the_module_and_runs_its_main(tmp_path, monkeypatch, capsys):
    (tmp_path / "fake_trainer.py").write_text("import sys\nCALLS = []\n"
                                              "def main(argv):\n    CALLS.append(argv)\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(first_step_rank, "LIBRARIES", ("colorsys",))
    monkeypatch.setenv("RANK", "0")
    assert first_step_rank.main(["fake_trainer", "--lr", "0.1"]) == 7
    assert sys.modules["fake_trainer"].CALLS == [["--lr", "0.1"]] and "colorsys" in sys.modules
    record = json.loads(capsys.readouterr().out)
    assert record["event"] == "libraries" and set(record) == {"event", "libraries_cpu_s", "imports_cpu_s"}
    monkeypatch.setenv("RANK", "1")  # only rank 0 says it
    assert first_step_rank.main(["fake_trainer"]) == 7 and capsys.readouterr().out == ""


def test_a_rank_without_an_importable_module_is_one_usage_line(capsys):
    for argv in ([], ["--help"], ["no_such_package.trainer"]):
        assert first_step_rank.main(argv) == 2
        assert capsys.readouterr().err.startswith("usage: python -m common.ddp.first_step_rank")
