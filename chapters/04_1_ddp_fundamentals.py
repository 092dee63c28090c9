# %% [markdown]
# # Chapter 4.1 — Distributed training fundamentals, and DDP written by hand
# **Guide sections:** beyond the guide (it breaks off in §2.3.1); builds on §2.2.1 Dataset与DataLoader类, toward the title's 分布式训练
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - What a distributed job is made of: processes, rank, local rank, world size, process groups, backends
# - How `torchrun` starts the processes and tells each one who it is
# - The four collectives — `all_reduce`, `broadcast`, `all_gather`, `barrier` — in a script of your own, run for real on 2 CPU processes, and what an all-reduce costs
# - Which device each rank takes, and why two ranks on a one-GPU laptop fall back to the CPU
# - How to turn Chapter 1's training loop into a DDP script, one change at a time, and check it: disjoint data, equal weights, validation accuracy summed over the ranks
# - Why that script waits for data much of every step, and how Chapter 3's pipeline removes the wait, so that a dozen epochs are cheap enough to reach over 70% validation accuracy
#
# > **Prerequisites:** chapters 1, 2.1 and 3.1 · **Time:** about 45 min to read, 4 min to run on a 2-core laptop · **Main path:** every section up to "DDP learns"; Changes 7 and 8 and "The same script, grown up" are *Going further*.

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/04_1_ddp_fundamentals.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/04_1_ddp_fundamentals.ipynb)
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
# Imports, the seed and the device. Multi-process work never runs inside this kernel: each run is a
# `torchrun` command started as a subprocess, and the cell shows what the processes printed. Whatever the
# processes import lives in `common` or in a script file beside this notebook (`scripts/04_1/`), because a
# second process cannot import anything defined in a notebook. What the runs write goes to `runs/04_1/`
# (git-ignored).

# %%
import json
import os
import shutil
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from common import (
    IMAGENET_STD,
    CustomImageDataset,
    SmallCNN,
    V2EvalPreset,
    count_parameters,
    describe_device,
    ensure_data,
    get_device,
    read_figure,
    seed_everything,
)
from common.ddp.collectives_demo import demo_collectives
from common.ddp.collectives_demo import main as collectives_demo
from common.ddp.launch import run_command, torchrun_command, worker_entry
from common.ddp.process_group import setup_distributed
from common.device import plan_device
from common.fast import BatchNormalize, CacheConfig, ensure_cache
from common.source import changed_lines, show_diff, show_file, show_source

generator = seed_everything(0)
device = get_device()
data = ensure_data()
SCRIPTS = Path("scripts/04_1")  # the scripts this chapter runs, in the repository
RUNS = Path("../runs/04_1")  # what they write
shutil.rmtree(RUNS, ignore_errors=True)
RUNS.mkdir(parents=True)
print("device:", describe_device(device), "| torch", torch.__version__)
print("backends built in:", {name: getattr(dist, f"is_{name}_available")() for name in ("gloo", "nccl")})

# %% [markdown]
# The sizes of this chapter's runs. A test of the notebook runs it with smaller ones; nothing else changes.

# %% tags=["parameters"]
# Sizes of this chapter's runs. `make test` runs the notebook with smaller ones (tests/notebook_parameters.py).
REPEATS = 15  # timed rounds of collectives.py over its tensor sizes
NUM_EPOCHS = 12  # epochs of the cached DDP runs (15 optimizer steps each)

# %% [markdown]
# ## The vocabulary of a distributed job
# A distributed training job is a set of ordinary operating-system **processes**, usually one per GPU
# (or, here, one per CPU core), all running the same script:
#
# | term | meaning | here |
# |---|---|---|
# | **world size** | how many processes take part | 2 |
# | **rank** | this process's number, `0 .. world_size - 1`, unique in the job | 0 or 1 |
# | **local rank** | its number on its own machine; picks the GPU (`cuda:{local_rank}`) | 0 or 1 |
# | **node** | one machine; `world_size = nodes × processes per node` | 1 |
# | **process group** | a set of ranks that run collectives together; the default group is all of them | {0, 1} |
# | **backend** | the library that moves the tensors: `nccl` between GPUs, `gloo` on CPUs | gloo |
#
# Rank 0 is special only by convention: it logs and writes checkpoints. The *rendezvous* — where the
# processes find each other before the first collective — is not hosted by rank 0 under `torchrun`: the
# launcher (the *agent*, one per machine; the one at `--rdzv-endpoint` with several machines) runs a
# `TCPStore` key-value server, and by default the workers reuse that very store for `init_process_group`.
#
# `torchrun` is the launcher: it starts `--nproc_per_node` copies of the script and gives each one the
# environment variables `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE` (the processes on this
# machine), `MASTER_ADDR`, `MASTER_PORT`.
# `common.ddp.process_group.setup_distributed` reads them, picks the backend (NCCL with CUDA, gloo without),
# calls `torch.cuda.set_device(local_rank)` *before* `init_process_group` so each rank owns one GPU, and
# joins the group. Without `torchrun` there are no such variables, and the same function returns a
# one-process description — which is what this kernel sees:

# %%
info = setup_distributed(device_type="cpu")
print(info)
assert (info.rank, info.world_size, info.initialized) == (0, 1, False)

# %% [markdown]
# ## Collectives on two processes
# A *collective* is an operation that every rank of the group calls and that completes only when all of
# them have; it moves tensors between the ranks. The script below, which each of the 2 processes runs,
# calls the four that DDP is built from and prints what each rank holds afterwards. It is the file
# `scripts/04_1/collectives.py` beside this notebook; the next cell shows it:
#
# - `dist.init_process_group("gloo")` joins the group: `torchrun` has put the rank, the world size and the
#   rendezvous address into each process's environment, and gloo is the backend that moves CPU tensors.
# - **all_reduce(SUM)**: every rank contributes a tensor, every rank receives the sum.
# - **broadcast**: rank 0's tensor is copied into every rank's.
# - **all_gather**: every rank receives the list of all ranks' tensors.
# - **barrier**: nobody leaves until everybody has arrived; rank 1 arrives 0.3 s late, on purpose.
# - Then a small DDP model: each rank back-propagates only its half of a batch.
# - Last, the time of one `all_reduce` at six tensor sizes, for the next section.
# - `dist.destroy_process_group()` sits in `finally`: the group is left on every way out.

# %%
show_file(SCRIPTS / "collectives.py")

# %% [markdown]
# ## Launching processes with torchrun
# `torchrun --standalone --nproc-per-node=2 collectives.py` starts the 2 processes. `torchrun` is the script
# that runs `python -m torch.distributed.run`, here with this kernel's interpreter; `--standalone` means
# one machine and a private rendezvous on a free port. `run_command` (from `common.ddp.launch`) runs the
# command as a subprocess with `OMP_NUM_THREADS=1`, so that each process takes one core, and raises with
# what the processes printed if they fail. `worker_entry` ends the command with the script and its
# arguments. Both ranks print into the same pipe, one line at a time, so
# their lines interleave; sorted by rank (a stable sort keeps each rank's own order) they read in turn:

# %%
def torchrun_script(script: Path, nproc: int, *args: str) -> str:
    """Run ``script`` under ``torchrun --standalone`` with ``nproc`` processes; return what they printed."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={nproc}", *worker_entry(script, args)]  # script, *args (see above)
    print("$ torchrun", *command[3:])
    return run_command(command, timeout=300).stdout


printed = torchrun_script(SCRIPTS / "collectives.py", 2, "--repeats", str(REPEATS))
lines = sorted(printed.splitlines(), key=lambda line: line.split(":")[0])  # rank 0's lines, then rank 1's
print("\n".join(lines))

# %% [markdown]
# Read from the top: both ranks print `world_size=2 backend=gloo`, the same job seen from each process.
# In the all-reduce rank 0 contributed 1 and rank 1 contributed 2, and both now hold 3; DDP's gradient
# averaging is this, divided by the world size. The broadcast overwrote rank 1's zeros with rank 0's
# `[42.0, 7.0]` (DDP does this with the initial weights). After the all-gather each rank holds both
# tensors, in rank order. At the barrier rank 0 arrived at once and left when rank 1 came, 0.3 s later.
# And after `backward()` on its own half of the batch, each rank holds the gradient of the *whole* batch:
# during the backward pass DDP all-reduced the gradients and divided them by 2 (the `ddp` wrapper must stay
# referenced until then: its hooks do the all-reduce). Light asserts on the printed values, so that
# running this notebook tests them:

# %%
def said(rank: int, start: str) -> str:
    """What ``rank`` printed after ``start``."""
    return next(line.split(start, 1)[1] for line in lines if line.startswith(f"rank {rank}: {start}"))


assert [said(rank, "all_reduce(SUM) of rank + 1: ") for rank in (0, 1)] == ["1 -> 3", "2 -> 3"]
assert [said(rank, "broadcast from rank 0: ") for rank in (0, 1)] == ["[42.0, 7.0]"] * 2
assert [said(rank, "all_gather: ") for rank in (0, 1)] == ["[[0.0, 1.0], [10.0, 11.0]]"] * 2
left = [float(said(rank, "barrier: ").split("left after ")[1].split()[0]) for rank in (0, 1)]
assert min(left) >= 0.25, "nobody left the barrier before rank 1 arrived, 0.3 s late"
assert all(said(rank, "DDP gradient of my half == gradient of the whole batch: ").startswith("True")
           for rank in (0, 1))
print("all collectives behaved as described")

# %% [markdown]
# **The same in `common`, with the hardening.** `common/ddp/collectives_demo.py` runs these steps as a
# module (`torchrun ... -m common.ddp.collectives_demo`, the command `torchrun_command` builds). It also
# runs without `torchrun` — one process, world size 1, every collective skipped (the section "One process
# alone" below runs it so) — and it gathers every rank's line to rank 0 (`gather_objects`), which prints
# them in rank order, so its output never interleaves. Its collectives:

# %% tags=["hide-output"]
print("$ torchrun", *torchrun_command("common.ddp.collectives_demo", nproc_per_node=2)[3:])
show_source(demo_collectives)

# %% [markdown]
# ## What an all-reduce costs
# DDP all-reduces every gradient once per optimizer step. With the ring algorithm each rank sends and
# receives about `2 × (world_size − 1) / world_size` times the gradient size, whatever the world size —
# which is why DDP scales to many GPUs. For this chapter's `SmallCNN` the message is tiny:

# %%
n_params = count_parameters(SmallCNN())
for world_size in (2, 8, 64):
    sent = 2 * (world_size - 1) / world_size * n_params * 4
    print(f"world size {world_size:>2}: each rank sends ~{sent / 1e3:.0f} kB per step")

# %% [markdown]
# The ring algorithm, drawn for 4 ranks: each gradient is cut into 4 chunks that travel around the ring twice, once summing (reduce-scatter), once spreading the sums (all-gather).
#
# ![Ring all-reduce on 4 ranks](figures/ring_allreduce.svg)
#
# *Reduce-scatter leaves each rank one fully summed chunk (Σ), all-gather passes those around; each rank only ever talks to its neighbour.*

# %% [markdown]
# `collectives.py` above also timed `all_reduce` at each tensor size on the 2 gloo processes (`allreduce_ms`):
# two untimed calls per size first (they set up buffers), then `REPEATS` rounds over all sizes in turn
# (15, in the parameters cell), keeping the fastest call of each size. On a machine shared with other programs a median still carries their interruptions (one
# rank paused while the other waits); the fastest call is what the collective itself costs. Small
# tensors all cost about the same fixed latency (the round trips); past a few hundred kilobytes the time
# grows with the bytes.
# That is why DDP packs gradients into ~25 MB *buckets* and all-reduces a bucket as soon as its gradients are
# ready, during the backward pass, instead of one call per parameter tensor.

# %%
cost_line = said(0, "all_reduce ms by size: ")  # "256:0.05 4096:0.06 ...": float32 values, milliseconds
cost = pd.Series({int(k): float(v) for k, v in (pair.split(":") for pair in cost_line.split())})
assert len(cost) == 6, "one time per tensor size"
fig, ax = plt.subplots(figsize=(5, 3))
ax.loglog(cost.index * 4, cost.values, marker="o")
ax.axvline(n_params * 4, color="grey", linestyle="--", label=f"SmallCNN's gradients ({n_params * 4 / 1e3:.0f} kB)")
ax.set(xlabel="tensor size (bytes)", ylabel="all_reduce (ms)", title="One all_reduce, 2 gloo processes")
ax.legend()
plt.show()
print((cost.rename("ms").rename_axis("float32 values")).to_frame().T.round(3))
read_figure("04_1/allreduce-16MB-vs-1kB", cost.iloc[-1] / cost.iloc[0], unit="×",
            what="one all_reduce of 16 MB against one of 1 kB, 2 gloo processes", expect=(">", 1.0));

# %% [markdown]
# What the buckets buy, drawn (a schematic, not a measurement): the same backward pass with one all-reduce at the end, and with gradient buckets all-reduced as soon as they fill.
#
# ![DDP gradient buckets overlapping backward](figures/ddp_buckets.svg)
#
# *With buckets the all-reduce of the last layers' gradients runs while backward still computes the first layers', so the step starts earlier.*

# %% [markdown]
# ## One process alone
# `common.ddp.collectives_demo` also runs without `torchrun`: no process group, world size 1, every collective a no-op.
# Training code written this way needs no second version for a laptop. Here it runs right in this kernel:

# %%
collectives_demo([])
assert not dist.is_initialized()

# %% [markdown]
# ## DataParallel vs DistributedDataParallel
# PyTorch has two ways to train one model on several GPUs:
#
# | | `nn.DataParallel` (DP) | `nn.parallel.DistributedDataParallel` (DDP) |
# |---|---|---|
# | processes | one process, one thread per GPU | one process per GPU |
# | each step | scatters the batch, **copies the model to every GPU**, gathers outputs on GPU 0 | nothing copied; each rank has its own model |
# | gradients | summed onto GPU 0 | all-reduced, overlapped with the backward pass (buckets) |
# | Python GIL | shared by all GPUs: a bottleneck | one interpreter per GPU |
# | GPU 0 | holds extra outputs and gradients: uneven memory | all ranks equal |
# | machines | one | any number |
# | data | one loader | one loader per rank (`DistributedSampler`) |
#
# PyTorch's documentation recommends DDP even on a single machine; DP is kept for compatibility. On a CPU,
# `DataParallel` does nothing at all — it simply calls the module:

# %%
dp = torch.nn.DataParallel(torch.nn.Linear(3, 1))
print("DataParallel device_ids on this machine:", dp.device_ids)
assert torch.equal(dp(torch.ones(2, 3)), dp.module(torch.ones(2, 3)))


# %% [markdown]
# ## From one process to DDP, one change at a time
# The collectives above are what DDP is built from. Now the real thing: Chapter 1's training loop,
# fed by Chapter 2's pipeline (`CustomImageDataset` with the `transforms.v2` eval preset at 32×32 pixels),
# as a script of its own, with Chapter 2.3's recipe, because that is the one that learns this data:
#
# - **Enough optimizer steps.** 960 training images at 64 per step are only 15 steps per epoch; Chapter 2.3
#   trained 24 epochs of 30 steps. The first run below, 2 epochs while decoding JPEGs, stays near chance
#   (it prints its validation accuracy); the cached pipeline later makes a dozen epochs cheap.
# - **AdamW with a one-cycle schedule** (`OneCycleLR`, stepped every optimizer step): the learning rate
#   warms up to `--lr`, then anneals to almost zero by the last step. While the rate is high, validation
#   accuracy can jump from epoch to epoch; annealing lets it settle (Exercise 6 trains without it).
# - **Validation on the 240 held-out images** after every epoch, in `evaluate`, which puts the model in
#   evaluation mode (BatchNorm then uses its running statistics); so `model.train()` must open every epoch,
#   or all epochs after the first would train in evaluation mode. `evaluate` returns counts, not a mean, so
#   that ranks can add them up later.
#
# The script also logs, per step, when it asked the loader for a batch, when the batch arrived, and when
# forward, backward and the optimizer step ended — the notebook reads that log later. It is the file
# `scripts/04_1/single.py`:

# %%
show_file(SCRIPTS / "single.py")

# %% [markdown]
# Each change below is the next file in `scripts/04_1/` (`ddp_step1.py` … `ddp_step4.py`, then `ddp.py`), and
# its cell shows the lines it changed against the step before (`common.source.show_diff`, a unified diff:
# `-` removed, `+` added). Open the files side by side in your editor to see each one whole.

# %% [markdown]
# **Change 1 — which device is mine? Then join the process group, and always leave it.** `torchrun` starts
# one copy of the script per process and sets `LOCAL_RANK`, `RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`,
# `MASTER_ADDR`, `MASTER_PORT` in each one's environment. Each rank then picks its device, in `pick_device`:
#
# - **a GPU of its own**, `cuda:{local_rank}`, with the `nccl` backend, when this machine shows at least as
#   many GPUs as it runs ranks (`torch.cuda.device_count() >= LOCAL_WORLD_SIZE`);
# - **the CPU**, with `gloo`, otherwise: fewer GPUs than ranks (a one-GPU laptop or Colab running 2 ranks
#   would fail at `set_device("cuda:1")`, and NCCL refuses two ranks on one GPU), a Mac (no DDP backend
#   moves MPS tensors), or `COMPANION_DEVICE=cpu`, which every worker inherits from the shell that started
#   `torchrun`.
#
# Rank 0 says the choice in one line; every rank decides the same way from the same counts. With GPUs,
# `set_device(local_rank)` comes *before* `init_process_group`, so that each rank uses its own GPU.
# `destroy_process_group()` sits in `finally`, so the group is left on every way out, errors included.

# %%
show_diff(SCRIPTS / "single.py", SCRIPTS / "ddp_step1.py")

# %% [markdown]
# The same rule, grown up, is `common.device.plan_device` (its source is at the end of the chapter); the
# scripts of Chapter 4.2 on use it through `setup_distributed`. It is a pure function of what a rank knows
# (its ranks, the GPU count, MPS, `COMPANION_DEVICE`), so the notebook can ask it what the 2 ranks below
# will get on this machine:

# %%
def plan_for(cuda_count: int, mps: bool, forced: str | None = None, *, rank: int = 0, ranks: int = 2):
    """What ``rank`` of ``ranks`` ranks, all on one machine, gets for these counts."""
    return plan_device(rank=rank, local_rank=rank, local_world_size=ranks, world_size=ranks,
                       cuda_count=cuda_count, mps=mps, forced=forced)


plan = plan_for(torch.cuda.device_count(), torch.backends.mps.is_available(),
                os.environ.get("COMPANION_DEVICE") or None)
print(f"this machine, 2 ranks: {plan.device} + {plan.backend}", f"({plan.reason})" if plan.reason else "")
assert (plan.device.type == "cuda") == (plan.backend == "nccl")

# %% [markdown]
# and what it decides on machines this one is not (simulated counts: it reads nothing from the machine):

# %%
machines = {"no GPU": (0, False, None), "1 GPU (laptop, Colab)": (1, False, None), "2 GPUs": (2, False, None),
            "Mac (MPS)": (0, True, None), "2 GPUs, COMPANION_DEVICE=cpu": (2, False, "cpu")}
rows = {}
for name, (gpus, mps, forced) in machines.items():
    rank0, rank1 = (plan_for(gpus, mps, forced, rank=rank) for rank in (0, 1))
    rows[name] = {"rank 0": str(rank0.device), "rank 1": str(rank1.device), "backend": rank0.backend,
                  "why": rank0.reason or "one GPU per rank"}
table = pd.DataFrame(rows).T.rename_axis("2 ranks on")
assert list(table["backend"]) == ["gloo", "gloo", "nccl", "gloo", "gloo"]
print(table.to_string())

# %% [markdown]
# **Change 2 — give each rank its own part of the data.** `DistributedSampler` shuffles the indices with a
# seed every rank shares, pads them to a multiple of the world size, and deals them out: rank `r` takes
# positions `r, r + world_size, ...`. It replaces `shuffle=True`, which would give every rank its own
# shuffle of the *whole* dataset (the same one, even, if the ranks' seeds are equal). The shuffle is seeded
# with `seed + epoch`, so `set_epoch(epoch)` must run every epoch, or every epoch repeats epoch 0's order.
# Validation needs every image exactly once, and the padding would count some twice (240 images on 7
# ranks, say); so rank `r` simply takes validation images `r, r + world_size, ...` — a `range` is a valid
# sampler. The script also logs the indices this rank reads, for the checks below.

# %%
show_diff(SCRIPTS / "ddp_step1.py", SCRIPTS / "ddp_step2.py")

# %% [markdown]
# **Change 3 — wrap the model.** `DistributedDataParallel` broadcasts rank 0's initial weights to every
# rank, and during `backward()` it all-reduces the gradients (in buckets, overlapped with the rest of the
# backward pass) and divides them by the world size. After `backward()` every rank holds the same averaged
# gradient, so the same `optimizer.step()` keeps the replicas equal. Nothing else in the loop changes.

# %%
show_diff(SCRIPTS / "ddp_step2.py", SCRIPTS / "ddp_step3.py")

# %% [markdown]
# **Change 4 — reduce the metrics.** Each rank has counted only its own samples, training and validation.
# One `all_reduce` of the sums (loss × samples, correct, samples, and the validation's correct and samples)
# gives every rank the epoch's totals; divide afterwards. (Averaging the ranks' *means* would be wrong
# whenever they saw different numbers of samples.)

# %%
show_diff(SCRIPTS / "ddp_step3.py", SCRIPTS / "ddp_step4.py")

# %% [markdown]
# **Change 5 — rank 0 prints and saves.** Every rank now holds the same numbers and the same weights, so
# one of them is enough: otherwise each line is printed twice and every rank writes the same file at once.
# The saved weights are those of the plain model inside the wrapper (`model.module`), loadable without
# DDP. Each rank still writes its own small log file, which is what the notebook checks.

# %%
show_diff(SCRIPTS / "ddp_step4.py", SCRIPTS / "ddp.py")

# %% [markdown]
# The whole change from `single.py` to `ddp.py` in one diff — this is all there is to DDP:

# %%
removed, added = changed_lines(SCRIPTS / "single.py", SCRIPTS / "ddp.py")
print(f"single.py -> ddp.py: {removed} lines changed or removed, {added} added")
assert added <= 50, "DDP is a small change"
show_diff(SCRIPTS / "single.py", SCRIPTS / "ddp.py", context=0)

# %% [markdown]
# ## Running the script on two processes
# `torchrun --standalone --nproc_per_node=2 ddp.py ...`, started as a subprocess (`OMP_NUM_THREADS=1`, and
# the script sets one torch thread per process, so that the 2 processes share the cores instead of
# fighting over them). 2 epochs of the 960 training images, 32 per rank per step, 64 per step in all; the
# first line is rank 0 saying which device the ranks took:

# %%
def read_logs(out: Path) -> list[dict]:
    """Every rank's log, in rank order."""
    return [json.loads(p.read_text()) for p in sorted(out.glob("log_rank*.json"))]


printed = torchrun_script(SCRIPTS / "ddp.py", 2, "--out", str(RUNS / "ddp"), "--num-epochs", "2")
print(printed)

# %% [markdown]
# What the script claims, checked on what the two ranks wrote: one line per epoch (rank 0 only), one saved
# model, 960 training and 240 validation samples per epoch after the reduction; each epoch the two ranks
# read disjoint halves of the data, a new order every epoch; the weights on both ranks are identical at the
# end (the same sha256); and the loss fell. Two epochs are 30 optimizer steps: too few to learn much, as
# the last line says.

# %%
logs = read_logs(RUNS / "ddp")
assert printed.count("epoch ") == 2 and sorted(p.name for p in (RUNS / "ddp").glob("*.pt")) == ["model.pt"]
assert all((epoch["samples"], epoch["val_samples"]) == (960, 240) for epoch in logs[0]["epochs"])
for epoch in range(2):
    rank0, rank1 = (set(log["indices"][epoch]) for log in logs)
    assert not rank0 & rank1 and len(rank0 | rank1) == 960, "disjoint halves that cover the data"
assert logs[0]["indices"][0] != logs[0]["indices"][1], "set_epoch: a new order every epoch"
assert logs[0]["weights"] == logs[1]["weights"], "DDP keeps the replicas identical"
losses = [step["loss"] for step in logs[0]["steps"]]
assert np.mean(losses[-5:]) < np.mean(losses[:5]), "the loss should fall"
print(f"rank 0 read {len(logs[0]['indices'][0])} samples per epoch, rank 1 {len(logs[1]['indices'][0])}, "
      f"none in common; weights sha256 {logs[0]['weights'][:12]} on both ranks")
print(f"after {len(logs[0]['steps'])} steps: validation accuracy {logs[0]['epochs'][-1]['val_accuracy']:.3f} "
      f"(chance: {1 / 6:.3f})")

# %% [markdown]
# (Only the *parameters* are guaranteed equal. BatchNorm's running statistics are buffers: DDP copies rank
# 0's buffers to the others at the start of every forward pass, and each rank then updates them with its
# own half-batch, so at the very end they differ slightly. Save from rank 0, and they are rank 0's.)
#
# ## Where a DDP step spends its time
# The per-step log as a timeline, steps 3–10 of both ranks on one clock. Each step: wait for the loader,
# forward, backward — which includes the gradient all-reduce, so a rank that is ready first waits *there*
# for the other — and the optimizer step. The two ranks' steps line up: the all-reduce synchronises them.

# %%
PHASES = [("asked", "got", "waiting for data", "tab:red"), ("got", "forward", "forward", "tab:blue"),
          ("forward", "backward", "backward + all-reduce", "tab:purple"), ("backward", "done", "optimizer step", "tab:green")]


def plot_timeline(logs: list[dict], ax, steps=slice(3, 11)) -> None:
    origin = logs[0]["steps"][steps.start]["asked"]
    for rank, log in enumerate(logs):
        for start, end, label, colour in PHASES:
            spans = [(s[start] - origin, s[end] - s[start]) for s in log["steps"][steps]]
            ax.broken_barh(spans, (rank - 0.35, 0.7), color=colour, label=label if rank == 0 else None)
    ax.set(yticks=range(len(logs)), yticklabels=[f"rank {r}" for r in range(len(logs))], xlabel="seconds")


def wait_fraction(log: dict, skip: int = 2) -> float:
    """Share of the time between a rank's first timed step and its last spent waiting for batches."""
    steps = log["steps"][skip:]
    return sum(s["got"] - s["asked"] for s in steps) / (steps[-1]["done"] - steps[0]["asked"])


fig, ax = plt.subplots(figsize=(10, 2.2))
plot_timeline(logs, ax)
ax.set_title("ddp.py, 2 processes: 8 steps (decoding JPEGs in the loop)")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=4)
plt.show()
before = [wait_fraction(log) for log in logs]
print("data-wait fraction per rank:", [round(f, 2) for f in before])

# %% [markdown]
# Much of the picture is red: each rank decodes and resizes 32 JPEGs per step in its own loop and waits
# for that the share of every step printed above. More ranks would not fix that; a faster pipeline does.

# %% [markdown]
# ## Feeding DDP with Chapter 3's pipeline
# Chapter 3 made the same batches faster: decode and resize each image once into a uint8 cache, keep
# samples uint8 until the batch exists, normalize the whole batch last (`common.fast`). The caches (training
# and validation split) are built here, once, and checked against the Chapter 2 pipeline (the same
# normalized image, up to the rounding of the stored uint8 crop):

# %%
caches = {split: ensure_cache(CustomImageDataset(data.labels_csv(split), data.images_dir(split)),
                              data.root.parent / "cache" / f"{split}_32", CacheConfig(resize_size=32, crop_size=32),
                              verbose=False) for split in ("train", "val")}
train_set, cache = CustomImageDataset(data.labels_csv("train"), data.images_dir("train")), caches["train"]
image, label = train_set[0]
expected = V2EvalPreset(resize_size=32, crop_size=32)(image)
from_cache = BatchNormalize()(torch.from_numpy(np.array(cache.images[:1])))[0]
levels = ((from_cache - expected).abs() * torch.tensor(IMAGENET_STD).view(3, 1, 1) * 255).max().item()
assert cache.images.shape == (960, 3, 32, 32) and caches["val"].images.shape == (240, 3, 32, 32)
assert int(cache.labels[0]) == label and levels <= 1.001, "the same image, up to rounding to uint8"
print(f"uint8 caches: train {cache.images.shape}, {cache.images.nbytes / 1e6:.1f} MB; val "
      f"{caches['val'].images.shape}; differs from the Chapter 2 pipeline by at most {levels:.0f} uint8 level")

# %% [markdown]
# **Change 6 — read the cache, normalize last.** The loaders now yield uint8 crops from the caches (a few
# MB here, printed above, so each rank reads them into memory; a large cache stays a memory map), and the
# training loop and `evaluate` normalize each batch on the device in one pass
# (`common.fast.BatchNormalize`). The DDP parts do not change at all.

# %%
show_diff(SCRIPTS / "ddp.py", SCRIPTS / "ddp_cached.py")

# %% [markdown]
# Epochs are now cheap, so this run trains for `NUM_EPOCHS` epochs (12 in the parameters cell: 180 optimizer
# steps) on 2 processes, and
# once more on **1** process with the same global batch of 64 per step (one rank with 64 instead of two
# with 32 each), for the throughput and the learning curves below:

# %%
cache_arg = ["--cache", os.path.relpath(cache.root.parent)]
epochs_arg = ["--num-epochs", str(NUM_EPOCHS)]
printed2 = torchrun_script(SCRIPTS / "ddp_cached.py", 2, "--out", str(RUNS / "cached2"), *epochs_arg, *cache_arg)
printed1 = torchrun_script(SCRIPTS / "ddp_cached.py", 1, "--out", str(RUNS / "cached1"), *epochs_arg,
                           "--batch-size", "64", *cache_arg)
print(printed2, printed1, sep="")
cached2, cached1 = read_logs(RUNS / "cached2"), read_logs(RUNS / "cached1")
assert cached2[0]["weights"] == cached2[1]["weights"] and cached2[0]["epochs"][-1]["samples"] == 960

# %% [markdown]
# Before and after, per rank, and the timeline of the cached run on the same scale as the first one:
# the loader's share of the step is now a sliver.

# %%
after = [wait_fraction(log) for log in cached2]
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 2.6), gridspec_kw={"width_ratios": [1, 2.6]})
positions = np.arange(2)
left.bar(positions - 0.2, before, 0.4, label="decode JPEGs (ddp.py)", color="tab:red")
left.bar(positions + 0.2, after, 0.4, label="uint8 cache (ddp_cached.py)", color="tab:olive")
left.axhline(0.10, color="grey", linestyle="--", linewidth=1)
left.set(xticks=positions, xticklabels=["rank 0", "rank 1"], ylabel="data-wait fraction", ylim=(0, 1),
         title="waiting for data")
left.legend(fontsize=8)
plot_timeline(cached2, right)
right.set_xlim(ax.get_xlim())
right.set_title("ddp_cached.py, 2 processes: 8 steps")
plt.tight_layout()
plt.show()
print(pd.DataFrame({"decode JPEGs": before, "uint8 cache": after}, index=["rank 0", "rank 1"]).round(3))
read_figure("04_1/data-wait-decoding", 100 * min(before), unit="%",
            what="share of the step ddp.py's ranks wait for data (the lower rank), decoding JPEGs")
read_figure("04_1/data-wait-cached", 100 * max(after), unit="%",
            what="share of the step ddp_cached.py's ranks wait for data (the higher rank)", expect=("<=", 10));

# %% [markdown]
# ## One process against two
# Samples per second of the whole job, from the logs (the steps after two warm-up steps), and the loss of
# every step against the samples seen: one process with 64 images per step against two with 32 each. With
# the same global batch the curves nearly coincide — the same algorithm, only spread over two processes
# (not exactly the same numbers: BatchNorm normalises each rank's half-batch with its own statistics;
# Chapter 4.2 shows a model for which 1 and 2 processes agree to rounding). How close the ratio of the
# two comes to 2× depends on the machine: two CPU processes need two free cores, and each step also waits
# for the all-reduce; the cell prints what this machine gave, with its cores and load.

# %%
def samples_per_s(logs: list[dict], per_rank_batch: int, skip: int = 2) -> float:
    steps = logs[0]["steps"][skip:]
    return len(steps) * per_rank_batch * len(logs) / (steps[-1]["done"] - steps[0]["asked"])


speed = pd.Series({"1 process": samples_per_s(cached1, 64), "2 processes": samples_per_s(cached2, 32)})
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3), gridspec_kw={"width_ratios": [1, 2]})
left.bar(speed.index, speed.values, color=["tab:grey", "tab:blue"])
left.set(ylabel="samples / s", title=f"scaling {speed.iloc[1] / speed.iloc[0]:.2f}x")
for logs_, label in ((cached1, "1 process, 64 per step"), (cached2, "2 processes, 2 x 32 per step")):
    loss = [s["loss"] for s in logs_[0]["steps"]]
    right.plot(np.arange(1, len(loss) + 1) * 64, loss, label=label, alpha=0.8)
right.set(xlabel="samples seen", ylabel="training loss (rank 0's batch)", title="the same global batch")
right.legend()
plt.tight_layout()
plt.show()
print(speed.round(1).to_string())
read_figure("04_1/scaling-2-processes", speed.iloc[1] / speed.iloc[0], unit="×",
            what=f"samples/s of 2 processes against 1, the same global batch ({plan.device.type})",
            expect=(">=", 1.1));
assert len(cached1[0]["steps"]) == len(cached2[0]["steps"]), "the same number of steps"

# %% [markdown]
# ## DDP learns
# Validation accuracy after every epoch, from the same two runs' logs: every rank evaluated its own share
# of the 240 validation images, and the counts were summed with `all_reduce` (Change 4). The last line
# compares the end of the 2-process run with the first run, 2 epochs of `ddp.py`, and with chance.

# %%
curves = pd.DataFrame({
    "train acc, 2 processes": [e["accuracy"] for e in cached2[0]["epochs"]],
    "val acc, 2 processes": [e["val_accuracy"] for e in cached2[0]["epochs"]],
    "val acc, 1 process": [e["val_accuracy"] for e in cached1[0]["epochs"]],
}, index=pd.RangeIndex(1, NUM_EPOCHS + 1, name="epoch"))
fig, ax = plt.subplots(figsize=(6, 3))
curves.plot(ax=ax, marker=".", ylim=(0, 1), ylabel="accuracy", title="SmallCNN, 32x32 shapes, global batch 64")
ax.axhline(1 / 6, color="grey", linestyle=":", label="chance (1/6)")
ax.legend()
plt.show()
val_acc = curves["val acc, 2 processes"].iloc[-1]
assert all(e["val_samples"] == 240 for e in cached2[0]["epochs"]), "every validation image exactly once"
print(curves.round(3).to_string())
print(f"2 processes: validation accuracy {val_acc:.3f} after {NUM_EPOCHS} epochs "
      f"({len(cached2[0]['steps'])} steps); ddp.py after 2 epochs ({len(logs[0]['steps'])} steps): "
      f"{logs[0]['epochs'][-1]['val_accuracy']:.3f}; chance {1 / 6:.3f}")
read_figure("04_1/ddp-val-accuracy", val_acc, unit="", what=f"validation accuracy of 2 processes after {NUM_EPOCHS} epochs",
            expect=(">=", 0.7));

# %% [markdown]
# ## Going further: gradient accumulation and mixed precision
# **Change 7 — gradient accumulation with `no_sync`.** To train with a global batch larger than fits, run
# K micro-batches per optimizer step. Inside `model.no_sync()` DDP skips the all-reduce and the gradients
# just add up locally; the K-th backward runs outside it and all-reduces the sum once. Dividing each
# micro-batch loss by K makes that sum the mean over the whole batch; the optimizer step, the scheduler step
# and `zero_grad` move after the K-th micro-batch, and the one-cycle schedule counts optimizer steps, not
# micro-batches. One all-reduce per optimizer step instead of K.

# %%
show_diff(SCRIPTS / "ddp_cached.py", SCRIPTS / "ddp_accumulate.py")

# %% [markdown]
# **Change 8 — mixed precision with `autocast`.** Under `torch.autocast(dtype=torch.bfloat16)` matrix
# products and convolutions run in bfloat16, which keeps float32's exponent range, so no `GradScaler` is
# needed (float16 would need one); weights, gradients and the optimizer stay float32. It pays on GPUs with
# bfloat16 units. On most CPUs it is *slower*, so the run below turns it on only when the plan puts the
# ranks on GPUs.

# %%
show_diff(SCRIPTS / "ddp_accumulate.py", SCRIPTS / "ddp_final.py")

# %% [markdown]
# One epoch with 2 micro-batches of 16 per rank per optimizer step (the global batch stays 64): half of
# the backward passes synchronise, and the replicas still end identical.

# %%
amp = ["--amp"] if plan.device.type == "cuda" else []  # the plan for 2 ranks on this machine (above)
printed = torchrun_script(SCRIPTS / "ddp_final.py", 2, "--out", str(RUNS / "final"), "--num-epochs", "1",
                          "--batch-size", "16", "--accum", "2", *amp, *cache_arg)
final = read_logs(RUNS / "final")
syncs = sum(step["sync"] for step in final[0]["steps"])
print(printed, f"micro-batches per rank {len(final[0]['steps'])}, optimizer steps (all-reduces) {syncs}",
      "| autocast:", "on" if amp else "off: it needs the ranks on GPUs, and these run on the CPU")
assert syncs == len(final[0]["steps"]) // 2 and final[0]["weights"] == final[1]["weights"]

# %% [markdown]
# ## Going further: the same script, grown up
# `ddp.py` is the whole idea; a script for long runs needs more around it: resuming from snapshots after a
# crash, automatic restarts, exact-once validation, logging, gradient accumulation and mixed precision.
# That is `common.ddp.train` (its code in `common/ddp/trainer.py`), which Chapter 4.2 opens. Change 1 is its `setup_distributed`, for example
# (it also handles a plain `python` start, where `torchrun` set no variables):

# %% tags=["hide-output"]
show_source(setup_distributed)

# %% [markdown]
# and `pick_device` grown up is `common.device.plan_device`, the pure function behind the table in
# Change 1: it also honours `COMPANION_DEVICE=cuda` (or fails saying why it cannot), keeps a lone process
# on MPS, and handles hosts where each agent starts one worker (`ranks_per_host`):

# %% tags=["hide-output"]
show_source(plan_device)

# %% [markdown]
# ## Summary
# - A distributed job is N processes running one script; `torchrun` starts them and sets `RANK`,
#   `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`; its agent's `TCPStore` is the rendezvous.
# - `all_reduce`, `broadcast`, `all_gather`, `barrier` are the building blocks, and every rank must call
#   each of them; an all-reduce costs a fixed latency plus time per byte, which is why DDP buckets
#   gradients and overlaps them with `backward()`.
# - Each rank picks its device first: its own GPU (`cuda:{local_rank}`, NCCL) when the machine has one per
#   rank, else the CPU with gloo (fewer GPUs than ranks, a Mac, `COMPANION_DEVICE=cpu`);
#   `common.device.plan_device` is the same rule as a pure function.
# - Chapter 1's loop becomes DDP with a few dozen lines (counted above): `init_process_group` (backend from
#   the device, `set_device` first), `DistributedSampler` + `set_epoch`, a strided share of the validation
#   set, `DDP(model)`, counts summed with `all_reduce`, rank 0 printing and saving,
#   `destroy_process_group()` in `finally`.
# - Check a DDP script on what it wrote: disjoint data per rank, identical weights, every validation image
#   counted once, and a validation accuracy far above chance — which takes enough optimizer steps and an
#   annealed learning rate, not just more processes.
# - A DDP run decoding JPEGs in its loop waits for data a large share of each step (measured above);
#   Chapter 3's uint8 cache with normalization last brings that under 10%.
# - Prefer DDP to `DataParallel`: one process per device, no per-step model copies, no GIL contention.
#
# ## Further reading
# - [Distributed communication package (`torch.distributed`)](https://pytorch.org/docs/stable/distributed.html): backends, `init_process_group` and every collective used here.
# - [Getting Started with Distributed Data Parallel](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html): PyTorch's DDP tutorial, the same steps from a GPU's side.
# - [Distributed Data Parallel design notes](https://pytorch.org/docs/stable/notes/ddp.html): buckets, the overlap with backward, and `no_sync`.
# - [torchrun (Elastic Launch)](https://pytorch.org/docs/stable/elastic/run.html): every flag of the launcher and the variables it sets.
# - [Writing Distributed Applications with PyTorch](https://pytorch.org/tutorials/intermediate/dist_tuto.html): point-to-point messages and collectives from scratch, with the ring all-reduce.
#
# ## Exercises
# 1. Run `collectives.py` on 3 processes (the `2` in its `torchrun_script` call). Which printed values change, and how?
# 2. Remove `set_epoch` from a copy of `scripts/04_1/ddp.py` and run the copy instead: which assert fails, and why?
# 3. Make rank 1 skip the barrier in a copy of `scripts/04_1/collectives.py` and launch the copy. What happens,
#    and how long until gloo gives up? (Set a short `timeout` in `init_process_group` before trying;
#    Chapter 4.2's section on debugging a hung job shows how to find the rank that went missing.)
# 4. Run `ddp.py` with `--batch-size 8` and `--batch-size 128`. How do the data-wait fraction and the
#    timeline change, and why?
# 5. Give `ddp_cached.py` DataLoader workers (`num_workers=1`) instead of the cache, and compare the
#    data-wait fraction with both runs above.
# 6. Train at a constant learning rate: in a copy of `scripts/04_1/ddp_cached.py`, drop the `OneCycleLR` scheduler
#    (its two lines and `scheduler.step()`), and run it with `--lr 3e-3` for `NUM_EPOCHS` epochs, then for 3. How do
#    the validation accuracies per epoch compare with the table above?
# 7. Set `os.environ["COMPANION_DEVICE"] = "cpu"` in this kernel (`torchrun` and its workers inherit it) and
#    rerun `ddp.py` on a machine with GPUs: what does rank 0 print? Then ask `plan_for(0, True, ranks=1)`
#    what one process alone gets on a Mac. Why may a lone process use MPS when two ranks may not?

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. What do world size, rank and local rank mean, which environment variables does `torchrun` give each process, and who hosts the rendezvous?
# 2. In `collectives.py` on 2 ranks, what did `all_reduce(SUM)` of `rank + 1`, the broadcast, the all-gather and the barrier (rank 1 arriving 0.3 s late) each leave on the ranks?
# 3. What does an all-reduce cost as the tensor grows, and why does DDP therefore put gradients into buckets?
# 4. Why does a rank call `torch.cuda.set_device(local_rank)` before `init_process_group`, and when does it run on the CPU with gloo instead of its own GPU with NCCL?
# 5. What does `DistributedSampler` do, what goes wrong if `set_epoch(epoch)` is forgotten, and why does validation use a strided `range` instead?
# 6. Why does the script `all_reduce` the sums (loss × samples, correct, samples) and divide afterwards, rather than average each rank's mean?
# 7. Why do only rank 0 print and save, what exactly does it save, and which state may still differ between the ranks at the end?
# 8. How does gradient accumulation with `no_sync` work, and why is each micro-batch loss divided by K?
# 9. What share of each step did `ddp.py`'s ranks spend waiting for data while decoding JPEGs, and what changed it?
# 10. Why prefer `DistributedDataParallel` to `nn.DataParallel`?
