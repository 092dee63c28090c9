# %% [markdown]
# # Chapter 6.2 — Distributed checkpoints: save on 2 ranks, resume on 1 or 3
# **Guide sections:** beyond the guide — the title's 大规模深度学习 (large-scale training); like §2.1
# 数据管道的概念与重要性 argues for the pipeline, a long run is only as good as its ability to stop and go on.
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - `torch.distributed.checkpoint` (DCP) with `get_state_dict` / `set_state_dict`: one file per rank plus `.metadata`
# - That a checkpoint written by 2 FSDP ranks loads on 1 and on 3 ranks (resharding), and training
#   goes on to the same weights as an uninterrupted run
# - DCP's `Stateful` protocol: an `AppState` whose `state_dict` and `load_state_dict` DCP calls itself
# - Atomic saves, written out (a temporary folder, `fsync`, a rename) and then for real: a worker
#   SIGKILLed inside a save, `torchrun --max-restarts=1`, and the restart from the previous checkpoint
# - Clear errors for a checkpoint of another model, a missing shard file, a truncated `.metadata`
# - `dcp_to_torch_save` for inference and back; what `dcp.async_save` overlaps, timed
#
# Elastic training, with `torchrun` agents that join or leave a running job, is [Chapter 6.4](06_4_elastic_training.ipynb).
#
# > **Prerequisites:** chapters 4.2 and 6.1 · **Time:** about 30 min to read, 2 min to run on a 2-core laptop · **Main path:** every section but those titled "Going further" (the `Stateful` protocol, `common`'s hardened save, clear errors, async saves), which are optional.

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
import os
import shutil
import time
import warnings
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from common import ensure_data, get_device, seed_everything
from common.ddp.launch import run_command, torchrun_command
from common.fsdp import checkpoint as fsdp_checkpoint
from common.fsdp.checkpoint import (
    CheckpointError,
    async_save_checkpoint,
    from_torch_save,
    load_checkpoint,
    save_checkpoint,
    to_torch_save,
    training_state,
)
from common.fsdp.train import main
from common.models import SmallCNN, batchnorm_to_groupnorm
from common.readings import read_figure
from common.source import show_source

# Without a process group DCP warns that it assumes a single process: here that is the intent.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")
seed_everything(0)
device = get_device()
data = ensure_data(verbose=False)
RUNS = Path("../runs/06_2")
shutil.rmtree(RUNS, ignore_errors=True)
print("device:", device, "| runs in", RUNS)

# %% tags=["parameters"]
# Sizes of this chapter's runs. `make test` runs the notebook with smaller ones (tests/notebook_parameters.py).
ASYNC_LAYERS = 8  # 1024x1024 linear layers of the model saved in the async-save section

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
# ## Going further: DCP's `Stateful` protocol, values that save and load themselves
# The steps around `dcp.save` and `dcp.load` (`get_state_dict` before, `set_state_dict` after) can
# live in the value being saved. DCP treats any value with a `state_dict()` and a `load_state_dict()`
# as `Stateful` (a protocol in `torch.distributed.checkpoint.stateful`): `dcp.save` calls its
# `state_dict()`, and `dcp.load` reads into that dict and then hands it to its `load_state_dict()`.
# The PyTorch DCP tutorial wraps the model and its optimizer this way:

# %%
class AppState(Stateful):
    """A model and its optimizer, as one value that DCP saves and loads."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict:
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optim": optim_state}

    def load_state_dict(self, state_dict: dict) -> None:
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                       optim_state_dict=state_dict["optim"])


dcp.save({"app": AppState(model, optimizer)}, checkpoint_id=RUNS / "stateful")
sorted(p.name for p in (RUNS / "stateful").iterdir())

# %% [markdown]
# Loading is one call now: a fresh model and optimizer, wrapped, and `dcp.load`. No optimizer step is
# needed first (`get_state_dict` creates AdamW's state to load into), and no `set_state_dict` after:

# %%
again = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
again_optimizer = torch.optim.AdamW(again.parameters(), lr=0.1)
dcp.load({"app": AppState(again, again_optimizer)}, checkpoint_id=RUNS / "stateful")
assert all(torch.equal(a, b) for a, b in zip(again.parameters(), model.parameters(), strict=True))
moments = [o.state_dict()["state"][0]["exp_avg"] for o in (again_optimizer, optimizer)]
assert torch.equal(*moments)
print("weights and AdamW moments loaded by dcp.load alone; exp_avg of 0.weight:", tuple(moments[0].shape))

# %% [markdown]
# A model and a scheduler are `Stateful` as they are; so is an optimizer, but its own `state_dict()`
# keys the state by position in the parameter list, which changes with the model's wrapping, while
# `get_state_dict` keys it by parameter name. That is why `AppState` goes through `get_state_dict`:

# %%
scheduler = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(nn.Linear(2, 2).parameters()), step_size=1)
print({name: isinstance(value, Stateful) for name, value in
       {"AppState": AppState(model, optimizer), "nn.Module": model, "scheduler": scheduler}.items()})
print("optimizer.state_dict() keys:", list(optimizer.state_dict()["state"])[:2],
      "| get_state_dict keys:", list(get_state_dict(model, optimizer)[1]["state"])[:2])

# %% [markdown]
# `common.fsdp.checkpoint` keeps the two steps explicit instead (`training_state` calls `get_state_dict`,
# `load_checkpoint` calls `set_state_dict`), because it checks in between: the checkpoint's files and
# digests, and the loader position and settings it holds, all before the model is touched. A
# `load_state_dict` that `dcp.load` calls runs as soon as the tensors are read.

# %% [markdown]
# ## The grown-up version: `common.fsdp.checkpoint`
# `common.fsdp.train --checkpoint DIR` saves the model, the optimizer, the loader position, the
# learning-rate schedule and the RNG state with `save_checkpoint`, into `DIR/step-NNNNNN`, and resumes
# from the newest one. It saves every `--checkpoint-every` steps and, always, at the end of each epoch
# and where `--max-steps` stops it. A tiny run on 2 FSDP ranks, 6 of its 8 steps, a checkpoint every 3
# steps; the run's log says which steps it saved:

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
steps_per_epoch = records(RUNS / "two", "start")[0]["steps_per_epoch"]
saved_steps = list(dict.fromkeys(r["step"] for r in records(RUNS / "two", "checkpoint")))
print(f"{steps_per_epoch} steps per epoch; checkpoints saved at steps {saved_steps}; on disk "
      f"(the newest 2 are kept): {sorted(p.name for p in (RUNS / 'two' / 'ckpt').iterdir())}")
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

# %% [markdown]
# The two `.distcp` files are not the same size. `.metadata` says what each file holds, piece by piece
# (`storage_data`: file, offset, length). The cell sorts the pieces into chunks of sharded tensors (one
# in each file) and whole values written into one file only, and counts them and their bytes by file:

# %%
held = pd.DataFrame([{"file": info.relative_path, "piece": index.fqn, "bytes": info.length}
                     for index, info in metadata.storage_data.items()])
held["kind"] = held.groupby("piece")["file"].transform("nunique").map(
    {2: "chunks of sharded tensors", 1: "whole values, in one file only"})


def group(piece: str) -> str:
    """optim.state.<parameter>.step for the step counters, else the first two parts of the name."""
    parts = piece.split(".")
    if parts[:2] == ["optim", "state"]:
        return f"optim.state.<parameter>.{parts[-1]}"
    return piece if parts[1] == "loader" else ".".join(parts[:2]) + (".*" if len(parts) > 2 else "")


once = held[held["kind"] == "whole values, in one file only"]
for file, pieces in once.groupby("file")["piece"]:
    groups = pieces.map(group).value_counts().sort_index()
    print(f"{file}, written once:", ", ".join(f"{name} ({count})" if count > 1 else name
                                                for name, count in groups.items()))
chunk = held[(held["piece"] == "model.features.0.weight") & (held["file"] == "__0_0.distcp")]["bytes"].item()
print(f"rank 0's chunk of model.features.0.weight: {2 * 3 * 3 * 3 * 4} bytes of numbers, {chunk} bytes in the file")
held.groupby(["file", "kind"])["bytes"].agg(pieces="count", bytes="sum")

# %% [markdown]
# Both files hold one chunk of every sharded tensor (the model's weights and AdamW's two moments): that
# part is alike. The rest are values that are the same on every rank — the optimizer's `step` counters
# and settings (`param_groups`), the learning-rate schedule, the position, the RNG states — and DCP's
# planner removes such duplicates before the save, so one rank writes each; here they all went to one
# file. Only the loader state is a rank's own (`extra.loader.rank<R>`, one in each file). And at this
# tiny size a piece is mostly file format, not numbers (DCP writes each piece in `torch.save`'s format,
# over a kilobyte however small: the line above). So the file that took the once-only values is the
# larger one; for a real model, whose sharded tensors are megabytes, the two files are nearly the same size.

# %%
by_file = held.pivot_table(index="kind", columns="file", values="bytes", aggfunc="sum", fill_value=0)
fig, ax = plt.subplots(figsize=(7.5, 2.2))
left = pd.Series(0, index=by_file.columns)
for kind, color in zip(by_file.index, ["tab:green", "tab:orange"], strict=True):
    ax.barh(by_file.columns, by_file.loc[kind] / 1024, left=left / 1024, color=color, label=kind)
    left = left + by_file.loc[kind]
ax.set_xlabel("KiB")
ax.set_title("step-000006: what each rank's file holds")
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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
# ## Publishing a checkpoint atomically
# A save takes a while (minutes for a large model), and a job can die in the middle of one: a kill, a
# preemption, a machine gone. The resume that follows must never take half a checkpoint for a whole
# one. The recipe has three steps: write everything under a hidden temporary name; force the bytes to
# the disk (`os.fsync`: otherwise a power cut can leave a renamed folder of empty files); then rename
# the folder to its real name. A reader looks only at real names. First two helpers: `fsync` of a file
# or of a folder (whose contents are its list of names), and the reader a resume uses:

# %%
def fsync(path: Path) -> None:
    """Force a file's bytes, or a folder's list of names, to the disk (POSIX)."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def newest(root: Path) -> str | None:
    """What a resume picks: the highest step-NNNNNN; hidden names (.step-...) do not count."""
    steps = sorted(p.name for p in root.iterdir() if p.name.startswith("step-"))
    return steps[-1] if steps else None


names = RUNS / "names"
for name in ("step-000001", ".step-000002.tmp"):
    (names / name).mkdir(parents=True)
print(sorted(p.name for p in names.iterdir()), "-> newest:", newest(names))

# %% [markdown]
# The writer: `write(tmp)` is whatever fills a folder, `dcp.save` here.

# %%
def publish(root: Path, step: int, write: Callable[[Path], None]) -> Path:
    final, tmp = root / f"step-{step:06d}", root / f".step-{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a writer that died before
    tmp.mkdir(parents=True)
    write(tmp)  # a death here leaves only the hidden folder
    for file in tmp.iterdir():
        fsync(file)  # the bytes are on the disk before any name points at them
    fsync(tmp)
    tmp.rename(final)  # the atomic step: step-NNNNNN appears complete, or not at all
    fsync(root)  # and the rename itself survives a power cut
    return final


saved = {"model": model.state_dict()}
atomic = RUNS / "atomic"
publish(atomic, 1, lambda folder: dcp.save(saved, checkpoint_id=folder))
print(sorted(p.name for p in atomic.iterdir()), "-> newest:", newest(atomic))

# %% [markdown]
# Now a writer that dies inside the save (an exception in this kernel stands in for the kill; the next
# section kills a real rank). `DiesBeforeMetadata` is DCP's `FileSystemWriter` whose `finish`, the
# step that writes `.metadata` last, raises: the data file is written, its index is not. Written
# straight under its real name, the half checkpoint is what the reader picks:

# %%
class Died(RuntimeError):
    """Stands in for a SIGKILL."""


class DiesBeforeMetadata(dcp.FileSystemWriter):
    def finish(self, metadata, results) -> None:  # DCP's last step: writing .metadata
        raise Died("killed after the data files, before .metadata")


def dying_save(folder: Path) -> None:
    dcp.save(saved, storage_writer=DiesBeforeMetadata(folder))


naive = RUNS / "naive"
shutil.copytree(atomic, naive)
try:
    dying_save(naive / "step-000002")  # no temporary name
except CheckpointException:  # DCP's error; note that it derives from BaseException
    pass
print("newest:", newest(naive), "holding", sorted(p.name for p in (naive / newest(naive)).iterdir()))

# %% [markdown]
# A resume would open `step-000002`: a data file without `.metadata`, so `dcp.load` fails; worse, had
# an earlier save of the same step left its `.metadata` there, it would read a mixture of two saves.
# The same death inside `publish`:

# %%
try:
    publish(atomic, 2, dying_save)
except CheckpointException:
    pass
print(sorted(p.name for p in atomic.iterdir()), "-> newest:", newest(atomic))
assert newest(atomic) == "step-000001" and newest(naive) == "step-000002"

# %% [markdown]
# The reader sees step 1, complete; the hidden leftover is removed by the next save of step 2. DCP
# does the same for its own files: each is `fsync`ed as it is written (`FileSystemWriter(sync_files=True)`,
# the default), and `.metadata` is written to `.metadata.tmp`, `fsync`ed and renamed, last. So inside a
# folder `.metadata` marks a complete save; the rename of the folder adds that a `step-NNNNNN` name never
# points at an incomplete or mixed one.
#
# Within one POSIX file system a rename is atomic, so a checkpoint is either complete or absent. That
# guarantee is the file system's, not DCP's: object stores (S3, GCS) have no rename at all — a "rename"
# there is a copy of every object, then deletes — and the file systems mounted on top of them (s3fs,
# gcsfuse) or some network file systems do not make it atomic either. There one publishes differently,
# e.g. writes a small marker object last and treats a checkpoint without it as absent.

# %% [markdown]
# ## Going further: the same in `common`, with the hardening
# `save_checkpoint` is `publish` for many ranks: `_fresh_tmp` (rank 0 clears and makes the hidden
# folder, then a barrier), DCP writing through `DigestingWriter` (every file's sha256 into `.metadata`),
# then `_publish`: a barrier, so that every rank has written, the rename on rank 0 only, and a barrier
# again, so that no rank goes on before the checkpoint exists. It also handles the same step saved
# again after a restart (the old `step-NNNNNN` is moved aside first; a death between the two renames
# leaves no folder of that step, and the previous checkpoint is the newest) and keeps only the newest
# `keep`. It leaves the files' `fsync` to DCP and does not `fsync` the parent folder after the rename:
# a power cut right then may undo the rename, which leaves the hidden folder, ignored, and the previous
# checkpoint as the newest, so a resume starts one checkpoint earlier, never from a broken one.

# %% tags=["hide-output"]
show_source(save_checkpoint)

# %% tags=["hide-output"]
show_source(fsdp_checkpoint._fresh_tmp)

# %% tags=["hide-output"]
show_source(fsdp_checkpoint._publish)

# %% [markdown]
# ## A kill inside a save, and `torchrun --max-restarts=1`
# Now a real kill, on 2 FSDP ranks: the last rank SIGKILLs itself inside step 6's `save_checkpoint`,
# after DCP wrote the hidden `.step-000006.tmp` and before the rename (`--kill-in-save`, through the
# `on_written` hook). torchrun restarts the group (with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`, which
# `common.ddp.torchrun` sets for a launch with `--max-restarts`: the workaround Chapter 4.2 explains),
# and the new attempt resumes from the newest
# complete checkpoint. Which one is that? The table lists every checkpoint and the end of each epoch:

# %%
out = RUNS / "killed"
run_command(torchrun_command("common.fsdp.train", args(out, "--checkpoint-every", "3",
                                                       "--simulate-kill-at-step", "6", "--kill-in-save"),
                             max_restarts=1))
events = [(r["event"], r["attempt"], r["step"]) for r in map(json.loads,
          (out / "log.jsonl").read_text().splitlines()) if r["event"] in ("simulated_kill", "resume",
                                                                           "checkpoint", "epoch", "done")]
weights = torch.load(out / "final.pt", weights_only=True)
close = tolerance(out, RUNS / "uninterrupted")
assert ("epoch", 0, 4) in events and ("checkpoint", 0, 4) in events and ("resume", 1, 4) in events
assert all(torch.allclose(weights[k], reference[k], **close) for k in reference)
pd.DataFrame(events, columns=["event", "attempt", "step"])

# %% [markdown]
# Step 3 is the `--checkpoint-every 3` checkpoint; step 4 is the end of the first epoch (4 steps of 12
# images, as printed above), and `common.fsdp.train` saves at every epoch's end whatever
# `--checkpoint-every` says. So when step 6's save is killed, the newest complete checkpoint is step
# 4's, not step 3's: attempt 1 resumes there, does steps 5 and 6 again, saves 6 and 8, and ends at the
# uninterrupted run's weights.

# %% [markdown]
# ## Going further: bad checkpoints, clear errors, nothing changed
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
# ## Going further: what `dcp.async_save` overlaps
# `dcp.async_save(state, checkpoint_id=...)` first copies the state into CPU memory (staging) and only
# then returns a future; a thread plans and writes the files. Training may change the parameters as soon
# as the call returns — the thread writes the copy. Time both on the same state, a model of
# `ASYNC_LAYERS` linear layers of 1024 × 1024 with its AdamW state (the cell prints its size), here in
# one process:

# %%
torch.manual_seed(0)
big = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(ASYNC_LAYERS)])
big_optimizer = torch.optim.AdamW(big.parameters(), lr=1e-3)
x = torch.randn(16, 1024)


def big_step() -> None:
    big(x).square().mean().backward()
    big_optimizer.step()
    big_optimizer.zero_grad()


big_step()  # creates the AdamW state
big_state = training_state(big, big_optimizer)
parameters = sum(p.numel() for p in big.parameters())
print(f"{parameters / 1e6:.1f} M parameters: {parameters * 12 / 1e6:.0f} MB with AdamW's two moments")
start = time.perf_counter()
dcp.save(big_state, checkpoint_id=RUNS / "big_sync")
full_save = time.perf_counter() - start
start = time.perf_counter()
future = dcp.async_save(big_state, checkpoint_id=RUNS / "big_async")
blocking = time.perf_counter() - start
before = big[0].weight.detach().clone()
big_step()  # training goes on while the thread writes
steps_meanwhile = 1
while not future.done():
    big_step()
    steps_meanwhile += 1
future.result()
total = time.perf_counter() - start
read_figure("06_2/async-save-blocking", full_save / blocking, unit="×",
            what="how much shorter dcp.async_save blocks training than dcp.save of the same state",
            expect=(">", 1.0))
print(f"dcp.save: {full_save:.2f} s blocked | dcp.async_save: {blocking:.2f} s blocked (staging), "
      f"{total - blocking:.2f} s more in the thread; training steps meanwhile: {steps_meanwhile}")

# %% [markdown]
# The async checkpoint holds the weights of the moment of the call, not those of the steps taken while
# it was written:

# %%
template = {"model": {"0.weight": torch.empty_like(before)}}  # dcp.load fills it in place
dcp.load(template, checkpoint_id=RUNS / "big_async")
assert torch.equal(template["model"]["0.weight"], before)
assert not torch.equal(big[0].weight.detach(), before)
print("saved weights = those at the call; training steps taken since then:", steps_meanwhile)

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
# - `get_state_dict` / `set_state_dict` give name-keyed model and optimizer state for FSDP, DDP or one process;
#   wrapped in a `Stateful`, `dcp.save` and `dcp.load` call them.
# - A checkpoint written by 2 ranks continues on 1 or 3 to the same weights as an uninterrupted run (live,
#   with agents joining and leaving a `torchrun --nnodes=1:2` job, in Chapter 6.4).
# - Write to a hidden folder, `fsync`, rename: a kill mid-save leaves the previous checkpoint as the
#   newest (on a POSIX file system; object stores need a marker written last).
# - Validate before loading: another model, a missing shard or a truncated `.metadata` each name the file.
# - `dcp.async_save` blocks only for the copy into CPU memory; publish by rename after its future is done.

# %% [markdown]
# ## Further reading
# - [Getting started with Distributed Checkpoint (DCP)](https://pytorch.org/tutorials/recipes/distributed_checkpoint_recipe.html): `dcp.save`/`dcp.load` with an `AppState`, loading on another world size, `dcp_to_torch_save`.
# - [Asynchronous saving with DCP](https://pytorch.org/tutorials/recipes/distributed_async_checkpoint_recipe.html): `dcp.async_save`, staging in CPU memory, and a process group of its own for the writer.
# - [`torch.distributed.checkpoint`](https://pytorch.org/docs/stable/distributed.checkpoint.html): the API reference, with `get_state_dict`/`set_state_dict`, `Stateful`, `FileSystemWriter` and the format utilities.
# - [Getting started with FSDP2](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html): the part on saving and loading sharded state dicts.
# - [torchrun (elastic launch)](https://pytorch.org/docs/stable/elastic/run.html): `--max-restarts`, used here to restart after the kill.

# %% [markdown]
# ## Exercises
# 1. Resume the step-6 checkpoint with `--strategy ddp` on 2 ranks. Why does a checkpoint written by
#    FSDP load into DDP at all?
# 2. Save with `--keep 1` and a kill inside a save: what is left on disk after the restart?
# 3. Change `--batch-size` when resuming on 3 ranks. Does the run still reach the uninterrupted
#    weights? Which part of the saved position stops making sense?
# 4. Give `AppState` a learning-rate scheduler too, save after 3 scheduler steps and load into a fresh
#    one. Which of its values does the checkpoint hold, and where in `dcp.load`'s dict do they appear?
# 5. Time `publish` on the 100 MB state of the async section with and without its `fsync` calls. What
#    does the difference buy, and against which failure (a killed process, or a power cut)?
# 6. The graded exercises: [`exercises/ex06_fsdp_checkpoints.ipynb`](exercises/ex06_fsdp_checkpoints.ipynb).

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. Which files does a DCP checkpoint written by 2 FSDP ranks hold, and what does its `.metadata` record?
# 2. How does `dcp.load` differ from `torch.load`?
# 3. Why take the optimizer's state through `get_state_dict` rather than `optimizer.state_dict()`?
# 4. What is DCP's `Stateful` protocol, and why does `common.fsdp.checkpoint` keep the two steps explicit instead?
# 5. The step-6 checkpoint of a 2-rank run was continued on 1 process and on 3 ranks. What did that show, and why does it work?
# 6. What are the three steps of publishing a checkpoint atomically, and what goes wrong if `dcp.save` writes straight into `step-NNNNNN`?
# 7. On which storage is that rename not atomic, and how does one publish a checkpoint there?
# 8. In `save_checkpoint` on several ranks, why is there a barrier before and after the rename, and why does only rank 0 rename?
# 9. One rank SIGKILLed itself inside step 6's save, under `torchrun --max-restarts=1`. What did the run's log show?
# 10. What does `dcp.async_save` block for, which weights does its checkpoint hold, and when may `common` publish it?
