"""Tests for common/ddp/uneven.py without processes: the command line, the data, and the
one-process replay of what ``Join`` computes (checked against DDP itself in
tests/system/test_ddp_debugging_processes.py).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from common.ddp.uneven import fresh_model, join_reference, main, make_batches, report


@pytest.mark.parametrize(("argv", "flag"), [
    (["--timeout", "0"], "--timeout"), (["--timeout", "nan"], "--timeout"),
    (["--lr", "-1"], "--lr"), (["--batches", "3", "0"], "--batches"),
    (["--batch-size", "0"], "--batch-size")])
def test_a_bad_value_is_an_argparse_error_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and flag in capsys.readouterr().err


def test_without_torchrun_it_says_how_to_start_it(capsys, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert main(["--batches", "3", "5"]) == 1
    assert "run it under torchrun" in capsys.readouterr().err


def test_each_rank_has_its_own_batches_the_same_on_every_run():
    first, again, other = make_batches(0, 3, 4), make_batches(0, 3, 4), make_batches(1, 3, 4)
    assert len(first) == 3 and first[0][0].shape == (4, 8) and first[0][1].shape == (4,)
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(first, again, strict=True))
    assert not torch.equal(first[0][0], other[0][0])


def _sgd(batches: list[tuple[torch.Tensor, torch.Tensor]], lr: float) -> torch.Tensor:
    """Plain training in one process, the oracle."""
    model = fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for images, labels in batches:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_the_replay_is_plain_training_for_one_rank_and_for_equal_shares():
    mine = make_batches(0, 4, 6)
    assert torch.allclose(join_reference([mine], lr=0.1), _sgd(mine, 0.1))
    theirs = make_batches(1, 4, 6)
    together = [(torch.cat([a, b]), torch.cat([la, lb]))
                for (a, la), (b, lb) in zip(mine, theirs, strict=True)]
    assert torch.allclose(join_reference([mine, theirs], lr=0.1), _sgd(together, 0.1), atol=1e-6)


def test_a_rank_that_ran_out_contributes_zeros_over_the_initial_world_size():
    long, short = make_batches(0, 3, 6), make_batches(1, 1, 6)
    model = fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (images, labels) in enumerate(long):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images), labels) / 2  # over the 2 initial ranks
        if step == 0:  # the one step both ranks have
            loss = loss + nn.functional.cross_entropy(model(short[0][0]), short[0][1]) / 2
        loss.backward()
        optimizer.step()
    expected = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert torch.allclose(join_reference([long, short], lr=0.1), expected, atol=1e-6)
    assert not torch.allclose(join_reference([long, long[:1]], lr=0.1), expected, atol=1e-6)


def test_the_report_says_which_ranks_agree_with_each_other_and_the_replay():
    same, other = torch.zeros(3), torch.ones(3)
    results = [[{"join": False, "steps": 1, "error": None, "weights": same},
                {"join": True, "steps": 1, "error": None, "weights": same}],
               [{"join": False, "steps": 1, "error": "Timed out", "weights": other},
                {"join": True, "steps": 2, "error": None, "weights": same}]]
    rows = report(results, reference=same)
    assert [(r["rank"], r["join"], r["equal_on_all_ranks"], r["equal_to_reference"]) for r in rows] == [
        (0, False, False, True), (1, False, False, False), (0, True, True, True), (1, True, True, True)]
    assert rows[1]["error"] == "Timed out" and "weights" not in rows[0]
