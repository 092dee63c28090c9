"""Tests for common.ddp.store_join (the wait in init_process_group with each rendezvous store) and
its ranks' module, common.ddp.store_join_rank, without starting a process."""

from __future__ import annotations

import json

import pytest

from common.ddp import store_join, store_join_rank


def _joined(rank: int, called: float, returned: float) -> str:
    return json.dumps({"event": "joined", "rank": rank, "called": called, "returned": returned})


def test_a_join_runs_from_the_last_rank_s_call_to_the_last_return():
    """Rank 0 came first and waited for rank 1; what counts is what follows rank 1's call."""
    stdout = "\n".join(["device plan: ...", _joined(1, 10.50, 11.02), "other output",
                        _joined(0, 10.00, 11.00)])
    assert store_join.join_seconds(stdout, 2) == pytest.approx(0.52)


def test_a_launch_whose_ranks_did_not_all_say_when_they_joined_is_named():
    with pytest.raises(ValueError, match=r"the 'own' launch printed the joins of ranks \[1\], not of all 2"):
        store_join.join_seconds(_joined(1, 1.0, 1.1), 2, "the 'own' launch")


def test_the_table_counts_the_pauses_of_each_store():
    table = store_join.summarize({"agent": [0.015, 0.016, 0.014], "own": [0.016, 0.45, 0.62]}, 0.1)
    assert table["store"].tolist() == ["agent", "own"] and table["launches"].tolist() == [3, 3]
    assert table["paused"].tolist() == [0, 2]
    assert table["median_s"].tolist() == [0.015, 0.45] and table["max_s"].tolist() == [0.016, 0.62]


def test_each_store_is_a_launch_of_the_learner_s_launcher_with_or_without_restarts():
    """``own`` comes from ``--max-restarts`` (common.ddp.torchrun sets the variable then), as a learner's
    restartable launch gets it; ``agent`` is the launch without it."""
    assert store_join.STORES == {"agent": 0, "own": 1}
    command = store_join.torchrun_command(store_join.RANK_MODULE, nproc_per_node=2, max_restarts=1)
    assert "--max-restarts=1" in command and command[-2:] == ["-m", "common.ddp.store_join_rank"]


def test_a_bad_flag_is_one_argparse_line(capsys):
    for argv in (["--pause", "0"], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as raised:
            store_join.main(argv)
        assert raised.value.code == 2
    err = capsys.readouterr().err
    assert "--pause: must be more than 0, got 0.0" in err and "--rounds: must be at least 1, got 0" in err


def test_a_rank_outside_torchrun_or_with_arguments_says_what_runs_it(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    assert store_join_rank.main([]) == 2
    monkeypatch.setenv("RANK", "0")
    assert store_join_rank.main(["--help"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("usage: python -m common.ddp.store_join_rank") for line in err)
