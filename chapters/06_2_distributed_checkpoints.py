# %% [markdown]
# # Chapter 6.2 — Distributed checkpoints: save on 2 ranks, resume on 1 or 3
# **Guide sections:** beyond the guide — the title's 大规模深度学习 (large-scale training); like §2.1
# 数据管道的概念与重要性 argues for the pipeline, a long run is only as good as its ability to stop and go on.
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - `torch.distributed.checkpoint` (DCP) with `get_state_dict` / `set_state_dict`: one file per rank plus `.metadata`
# - That a checkpoint written by 2 FSDP ranks loads on 1 and on 3 ranks (resharding), and training
#   goes on to the same weights as an uninterrupted run
# - Atomic saves: a worker SIGKILLed inside a save, `torchrun --max-restarts=1`, and the restart from
#   the previous checkpoint
# - Clear errors for a checkpoint of another model, a missing shard file, a truncated `.metadata`
# - `dcp_to_torch_save` for inference and back; what `dcp.async_save` overlaps, timed
#
# Elastic training, with `torchrun` agents that join or leave a running job, is [Chapter 6.4](06_4_elastic_training.ipynb).

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/06_2_distributed_checkpoints.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/06_2_distributed_checkpoints.ipynb)
# Running in Colab or Kaggle? The next cell installs this companion's package `common` there (on Kaggle, first switch Internet on in the notebook's settings); on your own machine it installs nothing.

# %%
# Colab and Kaggle only: install this companion's package (a local run has it).
import os
import sys

if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    import importlib
    import subprocess

    package = "torch-pipelines-companion @ git+https://github.com/torch-pipelines-companion/torch-pipelines-companion"
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", package])
    importlib.invalidate_caches()  # so that `import common` below finds the new package
    print(f"Installed {package}")
else:
    print("Local run: nothing installed (this environment already has `common`)")

# %% [markdown]
# ## Setup

# %%
import io
import json
import shutil
import time
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from common import ensure_data, get_device, seed_everything
from common.ddp.launch import run_command, torchrun_command
from common.fsdp.checkpoint import (
    CheckpointError,
    async_save_checkpoint,
    from_torch_save,
    load_checkpoint,
    to_torch_save,
    training_state,
)
from common.fsdp.train import main
from common.models import SmallCNN, batchnorm_to_groupnorm

# Without a process group DCP warns that it assumes a single process: here that is the intent.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")
seed_everything(0)
device = get_device()
data = ensure_data(verbose=False)
RUNS = Path("../runs/06_2")
shutil.rmtree(RUNS, ignore_errors=True)
print("device:", device, "| runs in", RUNS)

# %% [markdown]
# ## DCP in one process, inline
# `get_state_dict(model, optimizer)` returns both state dicts with fully-qualified parameter names (the
# optimizer's state keyed by name, not by position), as DTensors under FSDP and plain tensors otherwise.
# `dcp.save` writes them into a *folder*; `dcp.load` reads **into** a state dict you give it, in place
# — its tensors say which pieces each rank wants.

# %%
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
model(torch.randn(4, 8)).sum().backward()
optimizer.step()
model_state, optim_state = get_state_dict(model, optimizer)
dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=RUNS / "inline")
sorted(p.name for p in (RUNS / "inline").iterdir())

# %% [markdown]
# Loading: a fresh model, its own (empty) state dicts as the template, `dcp.load`, then `set_state_dict`:

# %%
fresh = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.1)
fresh(torch.randn(4, 8)).sum().backward()
fresh_optimizer.step()  # creates optimizer state of the right shapes to load into
state = dict(zip(["model", "optim"], get_state_dict(fresh, fresh_optimizer), strict=True))
dcp.load(state, checkpoint_id=RUNS / "inline")
set_state_dict(fresh, fresh_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters(), strict=True))
print("loaded:", list(state["model"]), "| exp_avg entries:", len(state["optim"]["state"]))

# %% [markdown]
# ## The grown-up version: `common.fsdp.checkpoint`
# `common.fsdp.train --checkpoint DIR` saves the model, the optimizer, the loader position, the
# learning-rate schedule and the RNG state with `save_checkpoint`, into `DIR/step-NNNNNN`, and resumes
# from the newest one. A tiny run on 2 FSDP ranks, 6 of its 8 steps, a checkpoint every 3 steps:

# %%
def records(out: Path, event: str) -> list[dict]:
    return [r for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())
            if r["event"] == event]


def train_here(argv: list[str]) -> int:
    """common.fsdp.train in this process (world size 1); its JSON lines go to the log file only."""
    with redirect_stdout(io.StringIO()):
        return main(argv)


def tolerance(*outs: Path) -> dict[str, float]:
    """PyTorch's float32 tolerances if every run computed on the CPU; TF32's if one used a GPU."""
    on_gpu = any(r["device"].startswith("cuda") for out in outs for r in records(out, "start"))
    return {"rtol": 1e-2, "atol": 1e-3} if on_gpu else {"rtol": 1.3e-6, "atol": 1e-5}


def args(out: Path, *extra: str) -> list[str]:
    return ["--tiny", "--log-file", str(out / "log.jsonl"), "--save-final", str(out / "final.pt"),
            "--checkpoint", str(out / "ckpt"), *extra]


run_command(torchrun_command("common.fsdp.train", args(RUNS / "two", "--max-steps", "6",
                                                       "--checkpoint-every", "3")))
step6 = RUNS / "two" / "ckpt" / "step-000006"
files = {p.name: p.stat().st_size for p in sorted(step6.iterdir())}
assert set(files) == {".metadata", "__0_0.distcp", "__1_0.distcp"}
files

# %% [markdown]
# One `.distcp` file per rank, and `.metadata`, which records for every tensor its global shape and
# which chunk (offsets and sizes) lies where. The first convolution's weight, `(4, 3, 3, 3)`, was saved
# as two chunks of 2 output channels, one by each rank:

# %%
metadata = dcp.FileSystemReader(step6).read_metadata()
chunks = metadata.state_dict_metadata["model.features.0.weight"].chunks
where = {index.offset: info.relative_path for index, info in metadata.storage_data.items()
         if index.fqn == "model.features.0.weight"}
pd.DataFrame([{"offsets": tuple(c.offsets), "sizes": tuple(c.sizes),
               "file": where[torch.Size(c.offsets)]} for c in chunks])

# %%
fig, ax = plt.subplots(figsize=(5, 2.2))
ax.barh(list(files), [size / 1024 for size in files.values()], color="tab:green")
ax.set_xlabel("KiB")
ax.set_title("step-000006, written by 2 ranks")
fig.tight_layout()

# %% [markdown]
# ## Resharding: continue on 1 process and on 3 ranks
# Copy the step-6 checkpoint into two fresh folders, continue one run in this process (world size 1,
# nothing sharded) and one on 3 FSDP ranks, and compare both with an uninterrupted 1-process run.
# DCP reads, for each loading rank, the pieces of each tensor that rank's shard covers — whatever
# sharding wrote them. The global batch stays 12, so every run takes the same 8 steps. Each of the 3
# ranks gets its own GPU only on a host with 3 or more; otherwise all 3 run on the CPU with gloo, and
# rank 0 says why in one line (the device plan of `common.device.plan_device`, Chapter 4.1):

# %%
for name in ("on1", "on3"):
    (RUNS / name / "ckpt").mkdir(parents=True)
    shutil.copytree(step6, RUNS / name / "ckpt" / step6.name)
assert train_here(args(RUNS / "uninterrupted")) == 0
assert train_here(args(RUNS / "on1")) == 0
done = run_command(torchrun_command("common.fsdp.train", args(RUNS / "on3"), nproc_per_node=3))
print(*[line for line in done.stderr.splitlines() if line.startswith("device plan:")]
      or ["device plan: each of the 3 ranks on its own GPU with nccl"])

# %% [markdown]
# Both continued runs against the uninterrupted one, within PyTorch's float32 tolerances when all ran on
# the CPU (on a GPU, cuDNN's convolutions round to TF32 by default, so the check allows TF32's rounding
# there; the `rtol` column says which):

# %%
reference = torch.load(RUNS / "uninterrupted" / "final.pt", weights_only=True)
rows = []
for name in ("on1", "on3"):
    weights = torch.load(RUNS / name / "final.pt", weights_only=True)
    close = tolerance(RUNS / name, RUNS / "uninterrupted")
    for key in reference:
        torch.testing.assert_close(weights[key], reference[key], **close)
    resumed = records(RUNS / name, "resume")[0]
    rows.append({"run": name, "resumed at step": resumed["step"], "world size": resumed["world_size"],
                 "max |w - uninterrupted|": max((weights[k] - reference[k]).abs().max().item()
                                                for k in reference), "rtol": close["rtol"]})
pd.DataFrame(rows)

# %% [markdown]
# What DCP did there, drawn for one tensor saved by 2 ranks and loaded on 3:
#
# ![DCP's chunks resharded from 2 ranks to 3](figures/dcp_reshard.svg)
#
# *The checkpoint's two files are cut along rows, not ranks: three ranks load it by reading the rows they need, the middle rank from both files.*

# %% [markdown]
# ## A kill inside a save, and `torchrun --max-restarts=1`
# `save_checkpoint` lets DCP write into a hidden `.step-NNNNNN.tmp` folder and, once every rank is
# done, rank 0 renames it to `step-NNNNNN`. Within one POSIX file system a rename is atomic, so a
# checkpoint is either complete or absent. That guarantee is the file system's, not DCP's: object stores
# (S3, GCS) have no rename at all — a "rename" there is a copy of every object, then deletes — and the
# file systems mounted on top of them (s3fs, gcsfuse) or some network file systems do not make it atomic
# either. There one publishes differently, e.g. writes a small marker object last and treats a checkpoint
# without it as absent. Here the last rank SIGKILLs itself inside step 6's save, after writing and before
# the rename. torchrun restarts the group (with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` from `launch_env`, the
# workaround Chapter 4.2 explains), and the new attempt resumes from step 4, the previous complete checkpoint:

# %%
out = RUNS / "killed"
run_command(torchrun_command("common.fsdp.train", args(out, "--checkpoint-every", "3",
                                                       "--simulate-kill-at-step", "6", "--kill-in-save"),
                             max_restarts=1))
events = [(r["event"], r["attempt"], r["step"]) for r in map(json.loads,
          (out / "log.jsonl").read_text().splitlines()) if r["event"] in ("simulated_kill", "resume",
                                                                           "checkpoint", "done")]
weights = torch.load(out / "final.pt", weights_only=True)
close = tolerance(out, RUNS / "uninterrupted")
assert ("resume", 1, 4) in events and all(torch.allclose(weights[k], reference[k], **close)
                                          for k in reference)
pd.DataFrame(events, columns=["event", "attempt", "step"])

# %% [markdown]
# ## Bad checkpoints: clear errors, nothing changed
# `load_checkpoint` checks a checkpoint before it touches the model: `.metadata` present and readable,
# every file it names present and long enough, every tensor of this model present with the same shape.
# Each error names the file:

# %%
def attempt(path: Path, width: int) -> str:
    model = batchnorm_to_groupnorm(SmallCNN(6, width=width))  # as common.fsdp.train builds it
    optimizer = torch.optim.AdamW(model.parameters())
    try:
        load_checkpoint(path, model=model, optimizer=optimizer)
    except CheckpointError as error:
        return str(error)
    return "loaded"


bad = RUNS / "bad"
shutil.copytree(step6, bad / "missing")
(bad / "missing" / "__1_0.distcp").unlink()
shutil.copytree(step6, bad / "truncated")
(bad / "truncated" / ".metadata").write_bytes((step6 / ".metadata").read_bytes()[:200])
messages = {"another model (width 8)": attempt(step6, 8),
            "missing shard file": attempt(bad / "missing", 4),
            "truncated .metadata": attempt(bad / "truncated", 4)}
assert "another model" in messages["another model (width 8)"]
assert "__1_0.distcp" in messages["missing shard file"] and ".metadata" in messages["truncated .metadata"]
for case, message in messages.items():
    print(f"{case}:\n  {message}")

# %% [markdown]
# ## One file for inference, and back
# A DCP folder is made for many writers; for inference one usually wants a single `torch.save` file of
# full tensors. `dcp_to_torch_save` gathers it in one plain process (`to_torch_save` checks first);
# `torch_save_to_dcp` goes back. The file holds only tensors and plain values (dicts, lists, numbers,
# strings, bytes), so it loads with `weights_only=True`, as Chapter 1 taught: no pickled code runs:

# %%
single = to_torch_save(RUNS / "uninterrupted" / "ckpt" / "step-000008", RUNS / "model.pt")
full = torch.load(single, weights_only=True)
print(sorted(full), "| model tensors:", len(full["model"]))
assert all(torch.equal(full["model"][k], reference[k]) for k in reference)
back = from_torch_save(single, RUNS / "back")
sorted(p.name for p in back.iterdir())

# %% [markdown]
# ## Async saves: what `dcp.async_save` overlaps
# `dcp.async_save(state, checkpoint_id=...)` first copies the state into CPU memory (staging) and only
# then returns a future; a thread plans and writes the files. Training may change the parameters as soon
# as the call returns — the thread writes the copy. Time both on the same state, a model of 8.4 M
# parameters with its AdamW state (about 100 MB), here in one process:

# %%
torch.manual_seed(0)
big = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(8)])
big_optimizer = torch.optim.AdamW(big.parameters(), lr=1e-3)
x = torch.randn(16, 1024)


def big_step() -> None:
    big(x).square().mean().backward()
    big_optimizer.step()
    big_optimizer.zero_grad()


big_step()  # creates the AdamW state
big_state = training_state(big, big_optimizer)
start = time.perf_counter()
dcp.save(big_state, checkpoint_id=RUNS / "big_sync")
full_save = time.perf_counter() - start
start = time.perf_counter()
future = dcp.async_save(big_state, checkpoint_id=RUNS / "big_async")
blocking = time.perf_counter() - start
before = big[0].weight.detach().clone()
steps_meanwhile = 0
while not future.done():  # training goes on while the thread writes
    big_step()
    steps_meanwhile += 1
future.result()
total = time.perf_counter() - start
assert blocking < full_save
print(f"dcp.save: {full_save:.2f} s blocked | dcp.async_save: {blocking:.2f} s blocked (staging), "
      f"{total - blocking:.2f} s more in the thread, {steps_meanwhile} training steps meanwhile")

# %% [markdown]
# The async checkpoint holds the weights of the moment of the call, not those of the steps taken while
# it was written:

# %%
template = {"model": {"0.weight": torch.empty_like(before)}}  # dcp.load fills it in place
dcp.load(template, checkpoint_id=RUNS / "big_async")
assert torch.equal(template["model"]["0.weight"], before)
assert not torch.equal(big[0].weight.detach(), before)
print("saved weights = those at the call;", steps_meanwhile, "steps changed the live ones since")

# %% [markdown]
# `common.fsdp.checkpoint.async_save_checkpoint` keeps the atomic publish of `save_checkpoint`: DCP
# writes into the hidden `.step-NNNNNN.tmp`, and `PendingSave.wait()` renames it only after the future
# is done — a kill before that leaves the previous checkpoint as the newest. `common.fsdp.train
# --async-save` waits for the pending save before the next one and at the end, and gives the writing
# thread a gloo process group of its own: its collectives must not interleave with the training's.

# %%
pending = async_save_checkpoint(RUNS / "async_ckpt", 1, model=big, optimizer=big_optimizer)
hidden = sorted(p.name for p in (RUNS / "async_ckpt").iterdir())
published = pending.wait()
print("while pending:", hidden, "| after wait():", sorted(p.name for p in (RUNS / "async_ckpt").iterdir()))
assert hidden == [".step-000001.tmp"] and published.name == "step-000001"

# %% [markdown]
# ## Summary
# - DCP writes one file per rank plus `.metadata`, which maps every tensor chunk to a file and offset.
# - `get_state_dict` / `set_state_dict` give name-keyed model and optimizer state for FSDP, DDP or one process.
# - A checkpoint written by 2 ranks continues on 1 or 3 to the same weights as an uninterrupted run (live,
#   with agents joining and leaving a `torchrun --nnodes=1:2` job, in Chapter 6.4).
# - Write to a hidden folder and rename: a kill mid-save leaves the previous checkpoint as the newest.
# - Validate before loading: another model, a missing shard or a truncated `.metadata` each name the file.
# - `dcp.async_save` blocks only for the copy into CPU memory; publish by rename after its future is done.

# %% [markdown]
# ## Exercises
# 1. Resume the step-6 checkpoint with `--strategy ddp` on 2 ranks. Why does a checkpoint written by
#    FSDP load into DDP at all?
# 2. Save with `--keep 1` and a kill inside a save: what is left on disk after the restart?
# 3. Change `--batch-size` when resuming on 3 ranks. Does the run still reach the uninterrupted
#    weights? Which part of the saved position stops making sense?
# 4. The graded exercises: [`exercises/ex06_fsdp_checkpoints.ipynb`](exercises/ex06_fsdp_checkpoints.ipynb).
