"""common.ddp.trainer's end of a run: the trainer saves the final weights, the run log only logs."""

from __future__ import annotations

import json

import torch

from common.ddp.process_group import DistInfo
from common.ddp.run_log import RunLog, Timing, finish_run
from common.ddp.trainer import save_final_weights


def test_the_final_weights_are_written_only_where_a_path_is_given(tmp_path):
    weights = {"w": torch.arange(3.0)}
    save_final_weights(weights, tmp_path / "out" / "final.pt")
    assert torch.equal(torch.load(tmp_path / "out" / "final.pt", weights_only=True)["w"],
                       weights["w"])
    save_final_weights(weights, "")  # no --save-final
    save_final_weights(None, tmp_path / "none.pt")  # a rank that holds no gathered weights
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["final.pt", "out"]


def test_the_done_record_writes_no_model_file(tmp_path, capsys):
    info = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend=None,
                    initialized=False)
    finish_run(RunLog(str(tmp_path / "log.jsonl"), info), Timing(), step=5, first_step=2,
               world_size=1, batch_size=8, strategy="ddp")
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"]
    done = json.loads((tmp_path / "log.jsonl").read_text())
    assert (done["event"], done["steps_this_attempt"], done["strategy"]) == ("done", 3, "ddp")
    assert json.loads(capsys.readouterr().out) == done
