# %% [markdown]
# # Chapter 4.2 — Training with DistributedDataParallel
# **Guide sections:** beyond the guide (it breaks off in §2.3.1); builds on §2.2.1 Dataset与DataLoader类, toward the title's 分布式训练
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - How Chapter 4.1's `ddp.py` grows into `common.ddp.train`, and how `SmallCNN` trains with it on 2 processes with DDP, fed by Chapter 3's uint8 cache — to well above chance in
#   a few epochs, with a one-cycle learning-rate schedule — using `DistributedSampler` with `set_epoch`,
#   metrics reduced across ranks, and validation that counts every image exactly once
# - How rank 0 logs and writes atomic snapshots, and how a run resumes from one — exactly
# - What happens when a worker dies: `torchrun --max-restarts` restarts the group, which resumes
# - Why 2 processes give the same weights as 1 (and when they do not: BatchNorm)
# - How to find what hangs a job: `TORCH_DISTRIBUTED_DEBUG=DETAIL`, timeouts, and a stack dump of every rank
# - Gradient accumulation with `no_sync`, mixed precision on GPUs, and launching on N GPUs and machines
#
# > **Prerequisites:** chapter 4.1 · **Time:** about 40 min to read, 5 min to run on a 2-core laptop · **Main path:** every section but the two titled "Going further" (gradient accumulation, mixed precision).

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/04_2_ddp_training.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/04_2_ddp_training.ipynb)
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
# Imports, seed, device, the data, and a fresh folder for this notebook's runs. Every run below is
# `common.ddp.train`, started as a subprocess with `torchrun`; the notebook reads what the run wrote.

# %%
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from contextlib import redirect_stdout
from pathlib import Path
from unittest.mock import patch

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch.distributed.constants import default_pg_nccl_timeout, default_pg_timeout
from torch.utils.data import DistributedSampler

from common import (
    History,
    SmallCNN,
    count_parameters,
    describe_device,
    ensure_data,
    get_device,
    plot_history,
    read_figure,
    seed_everything,
)
from common.ddp.bench import WIDTH, benchmark, setups, steps_within_epoch, summarize
from common.ddp.config import TINY
from common.ddp.data import NormalizeCollate, build_loaders, cached_split
from common.ddp.debugging import arm_stack_dump, hung_ranks, read_stacks
from common.ddp.launch import RESTART_SAFE_ENV, launch_env, run_command, torchrun_command
from common.ddp.samplers import ShardSampler
from common.ddp.snapshot import read_snapshot
from common.ddp.train import main
from common.ddp.trainer import distributed_train_epoch
from common.source import show_file, show_source

generator = seed_everything(0)
device = get_device()
data = ensure_data()
SCRIPTS = Path("scripts/04_2")  # the script this chapter runs, in the repository
RUNS = Path("../runs/04_2")  # what the runs write
shutil.rmtree(RUNS, ignore_errors=True)
RUNS.mkdir(parents=True)
print("device:", describe_device(device), "| runs in", RUNS.as_posix())

# %% [markdown]
# The sizes of this chapter's runs. A test of the notebook runs it with smaller ones; nothing else changes.

# %% tags=["parameters"]
# Sizes of this chapter's runs. `make test` runs the notebook with smaller ones (tests/notebook_parameters.py).
NUM_EPOCHS = 6  # epochs of the main 2-process run
BENCH_STEPS = 25  # optimizer steps per run of the 1-against-2-process comparison (2 of them untimed)
BENCH_REPEATS = 3  # rounds of that comparison (the table shows medians)

# %% [markdown]
# ## The training entry point: `ddp.py` grown up
# Chapter 4.1 wrote `ddp.py`: a dozen lines on top of Chapter 1's loop. `common.ddp.train` is the same
# script grown up for long runs — snapshots and resume, automatic restarts, exact-once validation, a JSON
# log, accumulation and mixed precision as flags. It is one script for every scale: `python -m common.ddp.train` is one process,
# `torchrun --standalone --nproc_per_node=N -m common.ddp.train` is N (`common/ddp/train.py` holds only `main`;
# the steps live in the library module `common/ddp/trainer.py`, which other programs import). Its steps are named as in
# torchvision's reference scripts — `build_loaders`, `build_model`, an epoch function, an evaluation
# function, `main`; here the two are `distributed_train_epoch` and `distributed_evaluate` — and its settings are one dataclass, `TrainConfig`, from which the command line is built.
# `--batch-size` is the **global** batch: on 2 ranks each takes half. Its inner loop is 4.1's changes 4,
# 7 and 8 together — `no_sync` on all but the last micro-batch, `autocast` around the forward pass, and the
# metrics summed in one tensor for a single `all_reduce_sum` at the end:

# %% tags=["hide-output"]
show_source(distributed_train_epoch)

# %% [markdown]
# And `build_loaders` (in `common/ddp/data.py`) is 4.1's change 2 with the extras: the global batch split
# over ranks and micro-batches, a sampler that can resume in the middle of an epoch, an unpadded validation
# sampler (below), and a choice of two pipelines, `--data-pipeline decode` (Chapter 2's: every JPEG decoded
# per sample, every epoch; the default) or `--data-pipeline cache` (4.1's change 6: Chapter 3's uint8 cache,
# normalized per batch):

# %% tags=["hide-output"]
show_source(build_loaders)

# %% [markdown]
# Two helpers read the run's log:

# %%
def records(log: Path, event: str) -> list[dict]:
    """The JSON lines of one event type that rank 0 appended to ``log``."""
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["event"] == event]


def train(name: str, *args: str, nproc: int = 2, **launch) -> Path:
    """Run common.ddp.train under torchrun into RUNS/name; return that folder."""
    out = RUNS / name
    argv = [*args, "--log-file", str(out / "log.jsonl"), "--save-final", str(out / "final.pt")]
    started = time.perf_counter()
    run_command(torchrun_command("common.ddp.train", argv, nproc_per_node=nproc, **launch),
                timeout=300)
    print(f"{name}: {nproc} process(es), {time.perf_counter() - started:.1f} s")
    return out


# %% [markdown]
# ## Sharding the data: `DistributedSampler` and `set_epoch` (§2.2.1 Dataset与DataLoader类)
# The guide's `DataLoader(dataset, shuffle=True)` on every rank would give each rank its own shuffle of
# the *whole* dataset — and, since every rank seeds its generators alike (`seed_everything(0)`), the
# *same* batches on every rank. (The equal seed is not what makes DDP's replicas equal:
# `DistributedDataParallel(model)` broadcasts rank 0's parameters and buffers to every rank when it wraps
# the model. FSDP2's `fully_shard`, in Chapter 6, broadcasts nothing — each rank keeps its slice of the
# weights *it* built — so there every rank must build the same weights: the same seed, or one checkpoint
# loaded everywhere.) A `DistributedSampler` instead shuffles the indices with a seed every rank shares, then deals them out:
# rank `r` takes positions `r, r + world_size, ...`. The shuffle is seeded with `seed + epoch`, so
# **`sampler.set_epoch(epoch)` must be called every epoch** — forget it and every epoch repeats
# epoch 0's order:

# %%
def order(rank: int, epoch: int | None) -> list[int]:
    sampler = DistributedSampler(range(8), num_replicas=2, rank=rank, seed=0)
    if epoch is not None:
        sampler.set_epoch(epoch)
    return list(sampler)


table = pd.DataFrame({f"rank {r}": [order(r, None), order(r, 1), order(r, 2)] for r in (0, 1)},
                     index=["no set_epoch (any epoch)", "set_epoch(1)", "set_epoch(2)"])
print(table)
assert sorted(order(0, 1) + order(1, 1)) == list(range(8))

# %% [markdown]
# The same rule drawn for 10 indices on 4 ranks, where the split is uneven: the sampler pads the shuffled order with repeats from its start, then deals it out in turn.
#
# ![DistributedSampler's split of indices over ranks](figures/sampler_split.svg)
#
# *Every rank gets the same number of indices (the hatched ones are repeats that pad the split), and set_epoch gives each epoch a new order that all ranks agree on.*

# %% [markdown]
# ## Validation that counts every image once
# `DistributedSampler` pads the ranks to equal length by *repeating* indices: 13 validation images on 2
# ranks become 14, and one image is counted twice. Training needs equal lengths (every step all-reduces),
# evaluation does not, so `common.ddp.train` evaluates with `common.ddp.samplers.ShardSampler` (no padding) on
# the plain model, and sums (loss, correct, count) over the ranks once at the end.

# %%
padded = [i for r in (0, 1) for i in DistributedSampler(range(13), 2, r, shuffle=False)]
exact = [i for r in (0, 1) for i in ShardSampler(13, rank=r, world_size=2)]
print(f"DistributedSampler: {len(padded)} indices, {len(set(padded))} distinct")
print(f"ShardSampler:       {len(exact)} indices, {len(set(exact))} distinct")
assert sorted(exact) == list(range(13)) and len(padded) == 14

# %% [markdown]
# ## Training on two processes
# Chapter 4.1 measured its first `ddp.py` waiting for JPEG decoding, and Chapter 3's cache removing
# that wait. The main run therefore reads the same images — `labels.csv`, the
# v2 eval geometry at 32×32 pixels, no augmentation — from the uint8 cache (`--data-pipeline cache`; the
# cache is the one 4.1 built, or is built now, once). `cached_split` opens it, and the collate function
# normalizes each batch in one pass:

# %% tags=["hide-output"]
show_source(cached_split)

# %% tags=["hide-output"]
show_source(NormalizeCollate)

# %% [markdown]
# `SmallCNN` then trains on 2 CPU processes with gloo: 6 epochs of all 960 training images, validated on
# all 240 validation images after each, global batch 16 (8 per rank).
#
# A run this short needs a good learning-rate schedule: `--schedule onecycle` warms AdamW up to a
# high peak rate (`--lr 1e-2`) over the first 30% of the steps and then anneals it towards zero
# (`OneCycleLR`, stepped once per optimizer step). Starting at the peak would shake the fresh weights;
# staying there would never let them settle. Rank 0 prints and appends one JSON line per event, and
# writes a snapshot at the end of every epoch. `NUM_EPOCHS` (6, in the parameters cell) sets the length.

# %%
MAIN = ["--batch-size", "16", "--image-size", "32", "--no-augment", "--schedule", "onecycle", "--lr", "1e-2"]
main_run = train("main", *MAIN, "--num-epochs", str(NUM_EPOCHS), "--data-pipeline", "cache",
                 "--snapshot", str(RUNS / "main" / "snapshot.pt"))
epochs = pd.DataFrame(records(main_run / "log.jsonl", "epoch"))
epochs[["epoch", "step", "seconds", "train_loss", "train_acc", "train_count", "val_loss", "val_acc",
        "val_count"]].round(3)

# %% [markdown]
# The training metrics are sums over both ranks (`all_reduce_sum`), then divided — averaging the two
# ranks' *means* would be wrong whenever they saw different numbers of samples. Each of the 240
# validation images was counted exactly once per epoch, and each of the 960 training images once. And
# the model learned: chance is 1/6 ≈ 0.17 for six classes.

# %%
assert (epochs.val_count == 240).all() and (epochs.train_count == 960).all()
assert epochs.train_loss.iloc[-1] < epochs.train_loss.iloc[0]
print(f"train loss {epochs.train_loss.iloc[0]:.3f} -> {epochs.train_loss.iloc[-1]:.3f}; "
      f"validation accuracy {epochs.val_acc.iloc[0]:.2f} -> {epochs.val_acc.iloc[-1]:.2f}")
read_figure("04_2/main-val-accuracy", epochs.val_acc.iloc[-1], unit="",
            what=f"validation accuracy of the 2-process run after {NUM_EPOCHS} epochs", expect=(">", 0.5));

# %% [markdown]
# The curves, drawn from the run's log file (not from the processes' memory, which is gone). The slow
# start is the warm-up; most of the progress comes once the rate is high, and the last epochs, at a
# falling rate, consolidate it. Validation can sit *above* training: the training numbers are averaged
# over an epoch in which the model was still improving (and use BatchNorm's batch statistics), the
# validation numbers measure the model at the epoch's end:

# %%
history = History(*(epochs[c].tolist() for c in ("train_loss", "train_acc", "val_loss", "val_acc")))
fig = plot_history(history, title="SmallCNN, DDP on 2 CPU processes (from log.jsonl)")

# %% [markdown]
# ## Snapshots: what rank 0 writes
# A snapshot holds everything needed to continue exactly: model, optimizer (AdamW's moments), scheduler,
# epoch, optimizer step, the position inside the epoch, and *every* rank's RNG state. Rank 0 writes it to
# a temporary file in the same folder, `fsync`s it and renames it over the old one with `os.replace` — a
# process killed at any moment leaves the old snapshot or the new one, never a torn file. It is read back
# with `torch.load(weights_only=True)`, which refuses anything but tensors and plain containers.

# %%
snapshot = read_snapshot(main_run / "snapshot.pt")
print({k: snapshot[k] for k in ("epoch", "step", "batch_in_epoch")}, "| RNG states:", len(snapshot["rng"]))
print("entries:", sorted(snapshot))
assert snapshot["step"] == epochs.step.iloc[-1] and len(snapshot["rng"]) == 2

# %% [markdown]
# ## Why 2 processes equal 1 process — and BatchNorm
# DDP averages the ranks' gradients. Each rank's loss is the mean over its half-batch, so the average of
# the two is the mean over the whole batch — *if* each sample's loss depends only on that sample. The
# data order matches too: the single process uses the same `DistributedSampler` with `num_replicas=1`,
# and step `k` on 2 ranks covers exactly positions `kB .. (k+1)B − 1` of the shared shuffled order.
# Augmentation is seeded per `(seed, epoch, index)`, so it does not depend on who loads the image.
#
# **BatchNorm breaks this**: in training mode it normalises with the statistics of the batch the
# process sees — each rank's half of the batch instead of the whole batch — so the gradients differ. Three ways out: `SyncBatchNorm`
# (all-reduces the statistics; GPU only), BatchNorm in eval mode (frozen statistics, as in fine-tuning), or
# a normalisation without batch statistics. The `--tiny` configuration uses GroupNorm
# (`--norm group`), and the tests check 1 process against 2 to PyTorch's own tolerances. The tiny
# configuration:

# %%
print(TINY)

# %% [markdown]
# First the reference: the tiny configuration in **one** process, run right here in the kernel (world
# size 1, no process group — `main` is the same function `torchrun` calls in each worker):

# %%
tiny = ["--tiny", "--subset", "48"]
reference = RUNS / "reference"


def train_here(*argv: str) -> None:
    """common.ddp.train in this process (world size 1); its JSON lines go to the log file only."""
    with redirect_stdout(io.StringIO()):
        assert main(list(argv)) == 0
    seed_everything(0)  # main() seeded this kernel; restore the notebook's seed


train_here(*tiny, "--log-file", str(reference / "log.jsonl"), "--save-final", str(reference / "final.pt"))
print(pd.DataFrame(records(reference / "log.jsonl", "epoch"))[["epoch", "step", "train_loss", "val_acc"]])
ref_weights = torch.load(reference / "final.pt", weights_only=True)


def close_to_reference(weights: dict) -> bool:
    """Equal to the 1-process weights within PyTorch's own DDP test tolerances."""
    return all(torch.allclose(weights[k], ref_weights[k], rtol=1.3e-6, atol=1e-5) for k in ref_weights)


# %% [markdown]
# ## Resuming from a snapshot
# The same configuration on 2 processes, stopped after 4 optimizer steps — in the middle of epoch 1 —
# and started again minus `--max-steps`, here in the kernel on **1** process. The second start finds the
# snapshot, checks that its settings match, restores everything, and skips the samples already seen: the
# samples consumed so far are a prefix of the epoch's shuffled order on any number of ranks, so the world
# size may change at a restart, even mid-epoch (`RESUME_MAY_CHANGE` lists what else may). The result
# matches the uninterrupted 1-process run:

# %%
resume_args = [*tiny, "--snapshot", str(RUNS / "resumed" / "snapshot.pt")]
resumed = train("resumed", *resume_args, "--max-steps", "4")
train_here(*resume_args, "--log-file", str(resumed / "log.jsonl"), "--save-final", str(resumed / "final.pt"))
starts, dones = records(resumed / "log.jsonl", "start"), records(resumed / "log.jsonl", "done")
legs = pd.DataFrame([{"processes": s["world_size"], "from step": d["step"] - d["steps_this_attempt"],
                      "to step": d["step"]} for s, d in zip(starts, dones, strict=True)])
print(legs.to_string(index=False))
assert legs.values.tolist() == [[2, 0, 4], [1, 4, 12]]
resumed_weights = torch.load(resumed / "final.pt", weights_only=True)
assert close_to_reference(resumed_weights)

# %% [markdown]
# ## A failure and the automatic restart
# `--simulate-failure-at-step 3` makes the last rank exit abruptly at step 3 on the first attempt, as a
# crashed worker would. With `torchrun --max-restarts=1` the agent notices, stops the other rank,
# and starts the whole group again; the new workers find the snapshot of step 2 and continue.
# (`RESTART_SAFE_ENV`, which `python -m common.ddp.torchrun` sets when `--max-restarts` is above 0, gives
# each attempt a fresh rendezvous store — see the note in `common/ddp/launch.py`.) The tests also kill a
# worker with `SIGKILL` mid-epoch.

# %%
print("environment for restarts:", RESTART_SAFE_ENV)
failed = train("failure", *tiny, "--snapshot", str(RUNS / "failure" / "snapshot.pt"),
               "--snapshot-every", "2", "--simulate-failure-at-step", "3", max_restarts=1)
events = pd.DataFrame(records(failed / "log.jsonl", "start") + records(failed / "log.jsonl", "resume")
                      + records(failed / "log.jsonl", "simulated_failure"))
events.sort_values("time")[["event", "attempt", "step"]]

# %% [markdown]
# Attempt 0 died at step 3; attempt 1 resumed from step 2 and finished, close to the 1-process reference.
# (The tests also check it *bit for bit* against an uninterrupted 2-process run: same ranks, same order
# of floating-point operations.)

# %%
weights = torch.load(failed / "final.pt", weights_only=True)
assert [r["step"] for r in records(failed / "log.jsonl", "simulated_failure")] == [3]
assert [(r["attempt"], r["step"]) for r in records(failed / "log.jsonl", "resume")] == [(1, 2)]  # snapshot of step 2
assert records(failed / "log.jsonl", "done")[0]["attempt"] == 1 and close_to_reference(weights)
gap = max((weights[k] - ref_weights[k]).abs().max().item() for k in ref_weights)
print(f"restarted 2-process run vs uninterrupted 1-process run: largest difference {gap:.1e}")

# %% [markdown]
# ## Debugging a hung or mismatched job
# Every rank must call every collective, in the same order, with tensors of the same shapes: DDP's
# gradient all-reduce included. A rank that skips one (stuck in its data loader, say, or leaving a loop
# early) leaves the others waiting inside it, and a rank that calls a different one, or the same with
# another shape, gets a garbled result or a hang. Left alone, a job waits until the process group's
# timeout, which is long by default:

# %%
print(f"default timeouts: gloo {default_pg_timeout}, nccl {default_pg_nccl_timeout} (h:mm:ss)")

# %% [markdown]
# Three tools turn such a job into an answer, and a fourth is named for GPUs:
#
# - **`TORCH_DISTRIBUTED_DEBUG=DETAIL`** in the environment of `torchrun`: before each collective the ranks
#   compare what they are about to call (operation, shapes, dtypes) and all raise if it differs; the
#   comparison costs an extra exchange per collective, so it is for debugging runs only.
# - **`init_process_group(timeout=...)`**: a collective that cannot complete raises after that long
#   instead of waiting 30 minutes.
# - **A stack dump of every rank**: the ranks that wait are all inside the same collective; the one that is
#   *not* is the culprit, and its stack names the line. The standard library's `faulthandler` writes it,
#   even from a process blocked inside C++ (a gloo or NCCL wait): on a signal (`faulthandler.register`,
#   then `kill -USR1 <pid>` for a job that hangs now) or by a watchdog (`faulthandler.dump_traceback_later`:
#   "if this step is still running in 1 s, dump my stack").
# - On GPUs, **`NCCL_DEBUG=INFO`** (narrowed with `NCCL_DEBUG_SUBSYS=INIT,COLL`) makes NCCL log how it
#   connected the ranks and each collective it runs; NCCL does not run on CPUs, so not here.
#
# The script below has two bugs on purpose. First the ranks call mismatched collectives: an all-reduce of
# 2 values on rank 0 and of 3 on rank 1, then an all-reduce on rank 0 against a broadcast on rank 1. Then
# rank 1 gets stuck loading its batch and never reaches the step's all-reduce. Each rank arms a 1-second
# watchdog for the step, and the group's timeout is 3 s. It is the file `scripts/04_2/bugs.py`:

# %%
show_file(SCRIPTS / "bugs.py")

# %% [markdown]
# Launched like every job of this chapter, with `TORCH_DISTRIBUTED_DEBUG=DETAIL` added to the environment
# `launch_env` gives. The job is meant to fail, so the cell runs it with `subprocess.run` and keeps its
# exit code instead of raising, and sorts the ranks' lines by rank:

# %%
stacks = RUNS / "bugs" / "stacks"
command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(SCRIPTS / "bugs.py"), "--stacks", str(stacks), "--timeout", "3"]
started = time.perf_counter()
job = subprocess.run(command, capture_output=True, text=True, timeout=120,
                     env={**launch_env(), "TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
printed = sorted(job.stdout.splitlines(), key=lambda line: line.split(":")[0])
print(f"exit code {job.returncode} after {time.perf_counter() - started:.0f} s; {len(printed)} lines")
assert job.returncode != 0, "the job must fail: one rank hangs"

# %% [markdown]
# **The mismatches.** `DETAIL` caught both before any data moved, on both ranks, and its message says
# what each rank was about to run: rank 0's first error in full, then the last part of each:

# %%
def said(rank: int, start: str) -> str:
    """What ``rank`` printed after ``start``."""
    return next(line.split(start, 1)[1] for line in printed if line.startswith(f"rank {rank}: {start}"))


print(textwrap.fill(said(0, "shapes: "), 110), end="\n\n")
for rank in (0, 1):
    for bug in ("shapes", "operations"):
        message = said(rank, f"{bug}: ")
        assert message.startswith("Detected mismatch between collectives on ranks"), message
        print(f"rank {rank}, {bug}:", message.split("Collectives differ in the following aspects:")[1].strip())

# %% [markdown]
# Without `DETAIL` nothing compares the calls: gloo may return a wrong sum on one rank while the other
# times out, and NCCL may hang or corrupt data. **The hang.** Rank 0 waited in the step's
# all-reduce for 3 s, the group's timeout, then raised, and `torchrun` stopped rank 1 and failed the job.
# Under `DETAIL` the wait is a *monitored barrier* that names the rank that never came; without it gloo
# says only `Timed out waiting 3000ms for recv operation to complete`, and NCCL's watchdog `Watchdog
# caught collective operation timeout`:

# %%
print("rank 0:", said(0, "step: "))
assert re.search(r"Ranks? 1 failed to pass monitoredBarrier in 3000 ms", said(0, "step: "))

# %% [markdown]
# **The stack dumps.** A timeout says *that* a collective waited, and at best which rank it waited for;
# the stacks say *where* each rank was. Each rank's watchdog wrote its stack to `stacks/rank<R>.stack`
# after 1 s in the step. Read with a few lines (the files hold the build machine's paths, so only the
# file names are printed), innermost frame first:

# %%
FRAME = re.compile(r'File "(.+)", line (\d+) in (.+)')


def frames(rank: int) -> list[tuple[str, int, str]]:
    """(file name, line, function) of each frame in rank ``rank``'s dump, innermost first."""
    return [(Path(file).name, int(line), function)
            for file, line, function in FRAME.findall((stacks / f"rank{rank}.stack").read_text())]


for rank in (0, 1):
    print(f"rank {rank}:", *(f"{file}:{line} in {function}" for file, line, function in frames(rank)),
          sep="\n    ")

# %% [markdown]
# Rank 0 is inside torch's `all_reduce` (`distributed_c10d.py`), called from `train_step`: it waits. Rank 1
# is not in any collective: it is the one that hangs, and its innermost frame is the line to read:

# %%
script = (SCRIPTS / "bugs.py").read_text().splitlines()
hung = [rank for rank in (0, 1) if frames(rank)[0][0] != "distributed_c10d.py"]
file, line, function = frames(hung[0])[0]
print(f"rank(s) {hung} not in a collective; rank {hung[0]} is at {file}:{line} in {function}:",
      script[line - 1].strip())
assert hung == [1] and function == "load_batch" and "time.sleep" in script[line - 1]

# %% [markdown]
# **The same in `common`, with the hardening:** `common.ddp.debugging`. `arm_stack_dump` registers both
# ways to dump (the signal and, optionally, the watchdog) and writes the rank's pid next to its dump, so
# that `signal_ranks` can signal every rank of a job that hangs right now; `read_stacks` waits for every
# dump and names the ranks that wrote none; `hung_ranks` reads the main thread of the last dump of each
# file, counts a rank as waiting inside `torch.distributed` *or* in autograd's backward (where DDP's
# all-reduce waits), and gives each culprit's innermost frame of the job's own code. On these dumps:

# %%
culprits = hung_ranks(read_stacks(stacks, 2))
print({rank: str(frame) for rank, frame in culprits.items()})
assert list(culprits) == [1] and culprits[1].function == "load_batch"
show_source(arm_stack_dump)

# %% [markdown]
# ## Going further: gradient accumulation with `no_sync`
# With `--grad-accum K` each rank runs K micro-batches per optimizer step. Inside `model.no_sync()` DDP
# skips the all-reduce and gradients just accumulate locally; the K-th backward all-reduces once. Each
# micro-batch loss is divided by K, so the accumulated gradient is the mean over the full batch — the
# same step as without accumulation, with one all-reduce per step. What shrinks is the activations: a
# micro-batch is 1/K of the batch, so a backward pass holds about 1/K of them. The parameters, the
# gradients (accumulated over the micro-batches) and the optimizer state stay as large as before, so the
# memory peak falls by less than K — by little, for a model whose weights and optimizer state dominate.
# `--count-allreduces` registers a DDP communication hook that counts gradient synchronisations:

# %%
accum = train("accum", *tiny, "--grad-accum", "2", "--count-allreduces")
done = records(accum / "log.jsonl", "done")[0]
print(f"micro-batches per rank {2 * done['step']}, optimizer steps {done['step']}, "
      f"gradient all-reduces {done['allreduce_syncs']}")
assert done["allreduce_syncs"] == done["step"] == records(reference / "log.jsonl", "done")[0]["step"]
assert close_to_reference(torch.load(accum / "final.pt", weights_only=True))

# %% [markdown]
# ## Going further: mixed precision on GPUs
# `--amp` runs the forward pass under `torch.autocast(dtype=torch.bfloat16)`; bfloat16 keeps float32's
# exponent range, so no `GradScaler` is needed (float16 would need one). It is for CUDA; on this CPU the
# cell says so and skips.

# %%
if device.type == "cuda":
    amp_run = train("amp", "--num-epochs", "1", "--batch-size", "64", "--amp",
                    nproc=torch.cuda.device_count())
    print(records(amp_run / "log.jsonl", "epoch")[-1])
else:
    print("skipped: mixed precision needs CUDA, this machine has", describe_device(device))

# %% [markdown]
# ## Launching on N GPUs and on several machines
# The same script, more processes. On one machine with 8 GPUs, one process per GPU (`LOCAL_RANK` picks
# it, NCCL moves the gradients):
#
# ```bash
# torchrun --standalone --nproc_per_node=8 -m common.ddp.train --batch-size 512 --norm syncbatch --amp
# ```
#
# On two machines, the same command on each, meeting at a c10d rendezvous on the first:
#
# ```bash
# export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1   # a workaround for a restart bug, see below
# torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=node0:29500 \
#          --rdzv-id=job42 --max-restarts=3 -m common.ddp.train --snapshot /shared/snap.pt ...
# ```
#
# `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` works around a torchrun bug: after a restart the workers may be
# handed the previous round's store and fail with "Connection refused" (pytorch/pytorch#135712; the
# [troubleshooting page](../TROUBLESHOOTING.md) has the details). `launch_env` sets it for every command in this course.
#
# The tests run exactly this with two agents on 127.0.0.1 (one process each) and check the result
# against a single process. Under Slurm, `srun` starts one agent per node —
# `chapters/04_slurm_ddp_train.sbatch` is a commented template:

# %%
sbatch = Path("04_slurm_ddp_train.sbatch").read_text().splitlines()
print("\n".join(line for line in sbatch if line.startswith(("#SBATCH", "srun", "    --"))))

# %% [markdown]
# ## Throughput and data wait: the two pipelines
# The last line of every log, `done`, holds the run's samples/s (after two warm-up steps) and its
# **data-wait fraction** — the share of the time rank 0 waited for its next batch. The main run's
# settings once more on one process, here in the kernel, for 24 optimizer steps with each pipeline:
# `--data-pipeline decode` (Chapter 2's, every JPEG decoded in the loop) and `--data-pipeline cache`:

# %%
logs = {"decode (Chapter 2)": RUNS / "one_decode" / "log.jsonl",
        "uint8 cache": RUNS / "one_cache" / "log.jsonl"}
for log, pipeline in zip(logs.values(), ("decode", "cache"), strict=True):
    train_here(*MAIN, "--num-epochs", "1", "--max-steps", "24", "--data-pipeline", pipeline,
               "--log-file", str(log))
speed = pd.DataFrame({name: records(log, "done")[0] for name, log in logs.items()}).T
speed = speed[["world_size", "timed_steps", "samples_per_s", "data_wait_fraction"]].astype(float)
speed.round(3)

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
left.bar(speed.index, speed.data_wait_fraction, color=["tab:gray", "tab:olive"])
left.axhline(0.10, color="black", linestyle=":", label="10% of the step")
left.set_ylabel("data-wait fraction")
left.legend()
right.bar(speed.index, speed.samples_per_s, color=["tab:gray", "tab:olive"])
right.set_ylabel("samples/s")
fig.suptitle(f"The same training on 1 process ({describe_device(device)}), two pipelines")
fig.tight_layout()

# %% [markdown]
# The cache removes decoding from the loop, so its wait is the smaller on any machine. How small depends
# on how fast the step is: on a CPU the step is slow enough that the wait falls under 10%; on a GPU the
# step is so fast that even normalizing the cached bytes, batch by batch, can be a visible share. The
# cell prints both, with the machine they ran on:

# %%
decode_wait, cache_wait = speed.data_wait_fraction
read_figure("04_2/data-wait-decode", 100 * decode_wait, unit="%",
            what=f"share of the step 1 process waits for data, decoding JPEGs ({device.type})")
read_figure("04_2/data-wait-cache", 100 * cache_wait, unit="%",
            what=f"share of the step 1 process waits for data, from the uint8 cache ({device.type})",
            expect=("<=", 10) if device.type == "cpu" else None)
read_figure("04_2/cache-vs-decode", speed.samples_per_s.iloc[1] / speed.samples_per_s.iloc[0], unit="×",
            what="samples/s of the cached pipeline against decoding, 1 process", expect=(">", 1.0));

# %% [markdown]
# ## One process or two: a fair comparison
# Does a second process speed training up? The main run cannot say: its batch is 8 per rank at 32 px,
# so each step is a few milliseconds of compute against a gradient all-reduce of fixed cost, and its
# clock also ran through validation and snapshots. A fair comparison holds everything equal but the
# number of processes, with `common.ddp.bench` (also `python -m common.ddp.bench`):
#
# - **one thread per process in every run**, the single process included (`THREADS_PER_PROCESS`, given
#   as `--threads` and `OMP_NUM_THREADS`): 2 processes use 2 cores, 1 process uses one;
# - the same compute-bound pipeline (the uint8 cache, no augmentation) and the same per-rank work:
#   batch 32 per rank at 64 px, and SmallCNN at width 32 (`WIDTH`; the trainer's default is 16): a step
#   computes about four times as much for twice the activations and the gradients, so the ranks'
#   arithmetic, not the all-reduce or the memory bandwidth both processes share, is what is compared
#   (the cell prints the step time and the all-reduce's size);
# - the clock only inside the first epoch, after two warm-up steps (no validation, no snapshot);
# - the runs alternate (1, 2 strong, 2 weak, 1, ...), so a change in the machine's load hits all alike,
#   and the table shows medians of 3.
#
# Two questions, two kinds of scaling. **Weak scaling** keeps the batch per rank (2 ranks: global batch
# 64): how many more samples per second does a second process add? **Strong scaling** keeps the global
# batch (32, so 16 per rank): how much sooner is the *same* step done? The single process runs here in
# the kernel, with the environment `torchrun --nproc-per-node=1` would give it (`world_of_one`): the
# same DDP program in a gloo group of one, so every step does what a rank of the 2-process runs does,
# without waiting for a launcher to start. The 2-process runs go through `torchrun`. All on the CPU,
# whatever the machine has: this compares cores.

# %%
runs = setups(32, worker_baseline=False)
steps = steps_within_epoch(len(pd.read_csv(data.labels_csv("train"))), runs, BENCH_STEPS)
repeats = BENCH_REPEATS
started = time.perf_counter()
with patch.dict(os.environ, {"COMPANION_DEVICE": "cpu"}):
    results = benchmark(runs, repeats=repeats, steps=steps, in_process=True, verbose=False)
seed_everything(0)  # main() seeded this kernel; restore the notebook's seed
scaling = summarize(runs, results)
print(f"{len(runs)} setups x {repeats} repeats, {steps} steps each ({steps - 2} timed), "
      f"in {time.perf_counter() - started:.0f} s")
scaling[["setup", "scaling", "ranks", "per_rank_batch", "global_batch", "threads_per_process",
         "samples_per_s", "vs_1_rank", "data_wait_fraction"]].round(3)

# %% [markdown]
# The verdict, read from the table. Where the ratio falls short of 2, the rest of each step is the
# all-reduce and the two processes competing for memory bandwidth; on a busy machine, a third program
# taking a core (each reading names the cores and the load it ran with):

# %%
by = scaling.set_index("scaling")
step_ms = 1e3 * 32 / by.loc["baseline", "samples_per_s"]
grad_kb = 4 * count_parameters(SmallCNN(len(data.classes), width=WIDTH)) / 1e3
print(f"weak scaling (32 per rank): 2 processes give {by.loc['weak', 'vs_1_rank']:.2f}x the samples/s of 1; "
      f"strong scaling (global batch 32): {by.loc['strong', 'vs_1_rank']:.2f}x")
print(f"a step of 1 process computes for {step_ms:.0f} ms; the all-reduce moves {grad_kb:.0f} kB of "
      f"gradients per step; this machine has {os.cpu_count()} cores")
assert (scaling.threads_per_process == 1).all(), "one thread per process in every run"
read_figure("04_2/weak-scaling", by.loc["weak", "vs_1_rank"], unit="×",
            what="samples/s of 2 processes at 32 per rank against 1 process (weak scaling)", expect=(">=", 1.2))
read_figure("04_2/strong-scaling", by.loc["strong", "vs_1_rank"], unit="×",
            what="samples/s of 2 processes at 16 per rank against 1 process at 32 (strong scaling)");

# %% [markdown]
# On an idle machine with two free cores, compute-bound work and one thread each, a second process adds
# nearly a second process's worth of throughput — compare the ratio printed above: that is what DDP is
# for. Strong scaling often gains less, because each rank's half batch is less efficient work for the
# same fixed cost per step; on a CPU whose cores share one memory bus it can also gain more, since half a
# batch's activations stay in cache. The two readings above say which held on this machine. What the main run showed — small batches, where the
# fixed cost per step dominates — is the opposite end (exercise 4). `python -m common.ddp.bench` adds a
# fourth run, 1 process with 1 DataLoader worker (it also uses both cores), and `--data-pipeline decode`
# makes every run wait for data.

# %% [markdown]
# ## Summary
# - One entry point for 1 process and N (`python -m ...` / `torchrun ... -m ...`), `gloo` on CPUs,
#   `nccl` on GPUs, `destroy_process_group()` on every exit path.
# - `DistributedSampler` + `set_epoch` shard and reshuffle the training data; validation uses an
#   unpadded sampler and sums (loss, correct, count) across ranks, so each image counts once.
# - Rank 0 logs and writes atomic snapshots (temp file, `fsync`, `os.replace`) with the position inside
#   the epoch and every rank's RNG state; a resumed or restarted run matches an uninterrupted one exactly.
# - 2 ranks with global batch B equal 1 process with batch B — with a normalisation that has no batch
#   statistics (GroupNorm here, SyncBatchNorm on GPUs).
# - A hung or mismatched job: `TORCH_DISTRIBUTED_DEBUG=DETAIL` names mismatched collectives, a process-group
#   `timeout=` turns the wait into an error, and a stack dump of every rank (`faulthandler`) shows the one
#   rank that is not waiting in a collective, at its line; on GPUs `NCCL_DEBUG=INFO` logs NCCL's side.
# - `no_sync` turns K micro-batches into one all-reduce per optimizer step; `--amp` adds bfloat16 on GPUs.
# - `--data-pipeline cache` feeds the run from Chapter 3's uint8 cache: the data wait falls from most of
#   each step (Chapter 2's decoding) to a small share (under 10% on a CPU).
# - A fair 1-vs-2-process comparison holds threads per process, pipeline and per-rank work equal:
#   then 2 processes approach twice the samples/s of 1 (weak scaling); strong scaling depends on the batch.
# - A short run learns well with a one-cycle schedule (`--schedule onecycle`): warm up to a high peak
#   learning rate, then anneal.
#
# ## Further reading
# - [Distributed Data Parallel design notes](https://pytorch.org/docs/stable/notes/ddp.html): what DDP does in `backward()`, buckets, and `no_sync`.
# - [`DistributedSampler`](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler): padding, `drop_last` and `set_epoch`.
# - [Fault-tolerant Distributed Training with torchrun](https://pytorch.org/tutorials/beginner/ddp_series_fault_tolerance.html): snapshots and restarts, the tutorial's version of this chapter's.
# - [Debugging distributed applications](https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications): `TORCH_DISTRIBUTED_DEBUG`, `monitored_barrier` and the logs.
# - [Automatic Mixed Precision](https://pytorch.org/docs/stable/amp.html): `autocast`, bfloat16 and when a `GradScaler` is needed.
#
# ## Exercises
# 1. Train the tiny configuration with `--norm batch` on 1 and on 2 processes and compare the final
#    weights. How large is the difference, and why?
# 2. Kill one worker by hand (`kill -9 <pid>`) during a run with `--max-restarts=1 --snapshot-every 2
#    --step-delay 0.5`. What does the log show?
# 3. Remove `set_epoch` from `common/ddp/trainer.py` (in a copy) and check which samples each epoch sees.
# 4. Run `python -m common.ddp.bench --per-rank-batch 8` and `--per-rank-batch 64`. How does the
#    scaling change with the batch, and why? Then add `--data-pipeline decode`: what happens to the
#    ratio of 2 ranks to 1 when both are waiting for data?
# 5. The curves of the main run were still rising. Train it for 12 epochs, then with `--schedule cosine`
#    (no warm-up) at the same `--lr 1e-2`. Which reaches the higher validation accuracy, and why?
# 6. In a copy of `scripts/04_2/bugs.py`, let rank 1 call `dist.barrier()` where rank 0 all-reduces in `train_step` (and drop its
#    sleep). Run it with and without `TORCH_DISTRIBUTED_DEBUG=DETAIL`: what does each run print, how long
#    does it take, and what do the stack dumps show now that no rank is outside a collective?

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. Why can't every rank simply use `DataLoader(dataset, shuffle=True)`, and what is it that keeps DDP's replicas equal?
# 2. What does the chapter's table show for `DistributedSampler` without `set_epoch`, and why?
# 3. Why does `common.ddp.train` validate with `ShardSampler` rather than `DistributedSampler`?
# 4. What does a snapshot of `common.ddp.train` hold, and how is it written so that a kill never leaves a torn file?
# 5. A run on 2 processes stopped after 4 steps, in the middle of epoch 1, and resumed on 1 process. Why may the world size change at a restart, even mid-epoch?
# 6. Why do 2 ranks with global batch B learn what 1 process with batch B learns, and why does BatchNorm break this?
# 7. One rank failed at step 3 under `torchrun --max-restarts=1`. What happened next, and what does `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` have to do with it?
# 8. A DDP job hangs or gets garbled results. Which tools does the chapter use, and how do they find the culprit in `bugs.py`?
# 9. What does `--grad-accum K` save, and what does it not shrink?
# 10. What is the difference between weak and strong scaling, what did the fair 1-against-2-process comparison hold equal, and what did it measure?
