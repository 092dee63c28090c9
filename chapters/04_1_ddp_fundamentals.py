# %% [markdown]
# # Chapter 4.1 — Distributed training fundamentals
# **Guide sections:** beyond the guide (the title's 分布式训练, continuing §2.3.1 自定义数据集的创建)
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - What a distributed job is made of: processes, rank, local rank, world size, process groups, backends
# - How `torchrun` starts the processes and tells each one who it is
# - The four collectives — `all_reduce`, `broadcast`, `all_gather`, `barrier` — run for real on 2 CPU processes
# - How DistributedDataParallel (DDP) uses `all_reduce` to average gradients, and why DDP replaced `DataParallel`

# %% [markdown]
# ## Setup (beyond the guide — the title's 分布式训练)
# Imports, the seed and the device. Multi-process work never runs inside this kernel: each demo is a
# `torchrun` command started as a subprocess, and the cell shows what the processes printed. The code the
# processes run lives in `common` (`common/ddp/collectives_demo.py`), because a second process cannot import
# anything defined in a notebook.

# %%
import subprocess
import sys

import torch
import torch.distributed as dist

from common import SmallCNN, count_parameters, describe_device, get_device, seed_everything
from common.ddp.launch import launch_env, run_command, torchrun_command
from common.ddp.process_group import setup_distributed

generator = seed_everything(0)
device = get_device()
print("device:", describe_device(device), "| torch", torch.__version__)
print("backends built in:", {name: getattr(dist, f"is_{name}_available")() for name in ("gloo", "nccl")})

# %% [markdown]
# ## The vocabulary of a distributed job (beyond the guide — the title's 分布式训练)
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
# Rank 0 is special only by convention: it logs, writes checkpoints and hosts the rendezvous.
#
# `torchrun` is the launcher: it starts `--nproc_per_node` copies of the script and gives each one the
# environment variables `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`.
# `common.ddp.process_group.setup_distributed` reads them, picks the backend (NCCL with CUDA, gloo without),
# calls `torch.cuda.set_device(local_rank)` *before* `init_process_group` so each rank owns one GPU, and
# joins the group. Without `torchrun` there are no such variables, and the same function returns a
# one-process description — which is what this kernel sees:

# %%
info = setup_distributed(device_type="cpu")
print(info)
assert (info.rank, info.world_size, info.initialized) == (0, 1, False)

# %% [markdown]
# ## Launching processes with torchrun (beyond the guide — the title's 分布式训练)
# `torchrun_command` builds the command line; it is `python -m torch.distributed.run`, which is exactly
# what the `torchrun` script runs, with this kernel's interpreter. `--standalone` means one machine and
# a private rendezvous on a free port. `OMP_NUM_THREADS=1` gives each of the 2 processes one of the 2
# cores.

# %%
command = torchrun_command("common.ddp.collectives_demo", nproc_per_node=2)
print(" ".join(["OMP_NUM_THREADS=1", "torchrun", *command[3:]]))

# %% [markdown]
# ## Collectives on two processes (beyond the guide — the title's 分布式训练)
# Each rank runs `common/ddp/collectives_demo.py`. The demo gathers every rank's line to rank 0, which prints
# them in rank order:
#
# - **all_reduce(SUM)** — every rank contributes a tensor, every rank receives the sum (1 + 2 = 3).
#   DDP's gradient averaging is this, divided by the world size.
# - **broadcast** — rank 0's tensor is copied to all ranks (DDP does this with the initial weights).
# - **all_gather** — every rank receives the list of all ranks' tensors.
# - **barrier** — nobody leaves until everybody has arrived; rank 1 arrives 0.3 s late, so rank 0 waits.
# - last, a small DDP model: each rank back-propagates only its half of a batch, and after `backward()`
#   both hold the gradient of the *whole* batch.

# %%
done = run_command(command, timeout=120)
print(done.stdout)

# %% [markdown]
# Light asserts on the printed values, so that running this notebook tests them:

# %%
out = done.stdout
assert out.count("after=3") == 2 and out.count("[42.0, 7.0]") == 2
assert out.count("[[0.0, 1.0], [10.0, 11.0]]") == 2
assert "False" not in out.split("== barrier")[1]
print("all collectives behaved as described")

# %% [markdown]
# ## What an all-reduce costs (beyond the guide — the title's 分布式训练)
# DDP all-reduces every gradient once per optimizer step. With the ring algorithm each rank sends and
# receives about `2 × (world_size − 1) / world_size` times the gradient size, whatever the world size —
# which is why DDP scales to many GPUs. For this chapter's `SmallCNN` the message is tiny:

# %%
n_params = count_parameters(SmallCNN())
for world_size in (2, 8, 64):
    sent = 2 * (world_size - 1) / world_size * n_params * 4
    print(f"world size {world_size:>2}: each rank sends ~{sent / 1e3:.0f} kB per step")

# %% [markdown]
# ## One process alone (beyond the guide — the title's 分布式训练)
# The same script also runs under plain `python`: no process group, world size 1, every collective a
# no-op. Training code written this way needs no second version for a laptop.

# %%
single = subprocess.run([sys.executable, "-m", "common.ddp.collectives_demo"], capture_output=True,
                        text=True, env=launch_env(), check=True)
print(single.stdout.split("== all_reduce")[0])
assert "world_size=1 backend=None" in single.stdout

# %% [markdown]
# ## DataParallel vs DistributedDataParallel (beyond the guide — the title's 分布式训练)
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
# ## Summary
# - A distributed job is N processes running one script; `torchrun` starts them and sets `RANK`,
#   `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`.
# - Backend `nccl` for GPUs, `gloo` for CPUs; `set_device(local_rank)` before `init_process_group`, and
#   `destroy_process_group()` on every exit path (`common.ddp.process_group`).
# - `all_reduce`, `broadcast`, `all_gather`, `barrier` are the building blocks; DDP's gradient
#   averaging is an `all_reduce` that runs during `backward()`.
# - Prefer DDP to `DataParallel`: one process per device, no per-step model copies, no GIL contention,
#   several machines.
# - Notebooks start multi-process work as a subprocess and show its output; the code lives in `common`.
#
# ## Exercises
# 1. Run the demo with `--nproc_per_node=3` (edit `nproc_per_node`). Which printed values change, and how?
# 2. Add a `reduce` (result on one rank only) and a `reduce_scatter` to `common/ddp/collectives_demo.py`
#    (copy the file first); which of the four collectives can you build from them?
# 3. Make rank 1 skip the barrier. What happens, and how long until gloo gives up? (Set a short `timeout`
#    in `init_process_group` before trying.)
# 4. Time one `all_reduce` of a 100 MB tensor between the 2 CPU processes and compare with the
#    `2 × (N − 1) / N` estimate above.
