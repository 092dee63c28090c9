"""common/fsdp/meta.py on 2 gloo ranks (forked, with torchrun's variables: tests/system/
forked_ranks.py): a model built on the meta device, sharded and filled from rank 0's full state
dict equals one process's, and a dict that does not fit is refused on both ranks with the same
message (the unit twin: tests/unit/test_fsdp_meta.py)."""

from __future__ import annotations

import json

import pytest

from tests.system.forked_ranks import forked_ranks_command, run_forked

SCRIPT = '''
import json, sys
import torch, torch.distributed as dist
from torch import nn
from common.fsdp.meta import load_full_state_dict
from common.fsdp.sharding import shard_model

def build():
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
reference = build()
with torch.device("meta"):
    model = shard_model(build())
model.to_empty(device="cpu")
load_full_state_dict(model, reference.state_dict() if rank == 0 else None)
equal = all(torch.equal(p.full_tensor(), r) for p, r in zip(model.parameters(),
                                                           reference.parameters()))
bad = {k: v for k, v in reference.state_dict().items() if k != "2.bias"}
try:
    load_full_state_dict(model, bad if rank == 0 else None, source="bad.pt")
    refused = ""
except ValueError as error:
    refused = str(error)
with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
    json.dump({"equal": equal, "refused": refused}, f)
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_two_ranks_load_rank0s_full_state_dict_and_both_refuse_one_that_does_not_fit(tmp_path):
    script = tmp_path / "meta_load.py"
    script.write_text(SCRIPT)
    # Two ranks forked from one interpreter (tests/system/forked_ranks.py: torchrun's variables
    # without its agent; the subject is the loading, not the launcher).
    run_forked(forked_ranks_command(str(script), [str(tmp_path)], nproc=2))
    reports = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["equal"] for r in reports] == [True, True]
    assert reports[0]["refused"] == reports[1]["refused"]
    assert reports[0]["refused"].startswith("bad.pt does not fit this model")
    assert "missing 1: 2.bias" in reports[0]["refused"]
