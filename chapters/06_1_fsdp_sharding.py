# %% [markdown]
# # Chapter 6.1 — Sharding the model: FSDP2 on CPU processes
# **Guide sections:** beyond the guide — relates to §2.1 数据管道的概念与重要性 and the title's 大规模深度学习
# (large-scale training): §2.1 says why the pipeline matters; at scale, what each process must *hold*
# decides what can be trained at all.
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - What DDP replicates on every rank (parameters, gradients, AdamW state) and what ZeRO stages 1–3 shard
# - FSDP2's `fully_shard`, in a script of this chapter (`scripts/06_1/fsdp_script.py`): per block and
#   on the root, with DTensor placements and local shard shapes reported by each of 2 ranks
# - That 2 FSDP ranks with a global batch `B` learn the same weights as 1 process with batch `B`
# - A model built on the meta device, sharded, then filled by `to_empty` and `reset_parameters` or from
#   rank 0's full state dict; gradient accumulation with `set_requires_gradient_sync`; and
#   `clip_grad_norm_` on DTensors: all three on 2 ranks, against one process
# - Bytes per rank measured from the local shards, and samples/s, FSDP vs DDP side by side
# - `reshard_after_forward`, prefetching and `MixedPrecisionPolicy` — and `common.fsdp.train`, the same script grown up
#
# > **Prerequisites:** chapters 4.1 and 4.2 · **Time:** about 30 min to read, 2 min to run on a 2-core laptop · **Main path:** every section but those titled "Going further" (the hardening in `common`, three knobs of `fully_shard`, `common.fsdp.train`), which are optional.

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/06_1_fsdp_sharding.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/06_1_fsdp_sharding.ipynb)
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
# Imports, seed, device, and a fresh folder for this notebook's runs (paths are printed relative
# to the repository).

# %%
import inspect
import json
import shutil
import sys
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn

from common import get_device, seed_everything
from common.ddp.launch import run_command, torchrun_command
from common.fsdp.bench import BenchConfig, compare
from common.fsdp.meta import load_full_state_dict, materialize
from common.fsdp.sharding import bytes_per_rank, shard_model
from common.fsdp.train import gradient_sync
from common.models import SmallCNN, count_parameters
from common.readings import read_figure
from common.source import show_file, show_source

seed_everything(0)
device = get_device()
RUNS = Path("../runs/06_1")
shutil.rmtree(RUNS, ignore_errors=True)
RUNS.mkdir(parents=True)
print("device:", device, "| runs in", RUNS)

# %% tags=["parameters"]
# Sizes of this chapter's runs. `make test` runs the notebook with smaller ones (tests/notebook_parameters.py).
BENCH_STEPS = 12  # training steps of each strategy in the FSDP vs DDP benchmark

# %% [markdown]
# ## What every DDP rank holds, on paper
# Training with AdamW in float32 keeps, per parameter, the parameter (4 bytes), its gradient (4) and
# two moments (8): 16 bytes. DDP keeps **all of it on every rank**. ZeRO ("Zero Redundancy
# Optimizer") shards it over the `N` ranks instead: stage 1 the optimizer state, stage 2 also the
# gradients, stage 3 also the parameters — stage 3 is what FSDP's `fully_shard` does.
# (Activations come on top and are not sharded by any stage.)

# %%
GB = 1e9
sizes = {"SmallCNN (width 16)": count_parameters(SmallCNN(6, width=16)), "1B": 1e9, "7B": 7e9}
table = pd.DataFrame({name: {f"{'DDP' if s == 0 else f'ZeRO-{s}'} on 8 ranks":
                             bytes_per_rank(int(n), world_size=8, stage=s) / GB for s in range(4)}
                      for name, n in sizes.items()}).round(4)
assert table.loc["DDP on 8 ranks", "7B"] == 112.0 and table.loc["ZeRO-3 on 8 ranks", "7B"] == 14.0
table

# %% [markdown]
# The same four rows drawn for 4 ranks: filled cells are what a rank holds.
#
# ![What ZeRO stages 1, 2, 3 shard](figures/zero_stages.svg)
#
# *Each ZeRO stage shards one more kind of state over the 4 ranks (filled = held): the bytes each rank holds per parameter fall from 16 to 4.*

# %% [markdown]
# A 7B model needs 112 GB per rank under DDP — more than an 80 GB H100 holds (a 141 GB H200 or a 192 GB MI300X holds it, with little room left for activations) — and 14 GB per rank
# with ZeRO-3 on 8 ranks. The price of sharding is communication: before a unit's forward (and again
# in backward) the ranks **all-gather** its full parameters, and after backward they
# **reduce-scatter** the gradients, so each rank receives only its shard of the averaged gradient.

# %% [markdown]
# One block's parameters and gradients through a training step, on 2 ranks:
#
# ![FSDP all-gather and reduce-scatter around one block](figures/fsdp_unit.svg)
#
# *A block's full parameters exist only around its own forward and backward; outside them each rank holds just its shard, and its gradient shard.*

# %% [markdown]
# ## FSDP2, written in a script
# The script `scripts/06_1/fsdp_script.py` is Chapter 4's recipe with one change of substance: instead
# of `DDP(model)`, it calls `fully_shard` on each block (bottom-up) and then on the root. Every parameter
# becomes a `DTensor` whose placement `Shard(0)` says "split along dimension 0 across the ranks"; the
# optimizer is built *after* sharding, so it only ever sees — and keeps state for — the local shards.
# Under plain `python` (no `RANK` in the environment) it runs unsharded, as one process. Each rank
# writes a report of what it holds (`rank<R>_of_<N>.json`) into the folder named on its command line,
# and rank 0 the full weights it learned (`weights_<N>.pt`):

# %%
fsdp_script = Path("scripts/06_1/fsdp_script.py")
show_file(fsdp_script)

# %% [markdown]
# Run it once as one process (`python scripts/06_1/fsdp_script.py ../runs/06_1`) and once with
# `torchrun` on 2 processes (gloo), as subprocesses, and collect what each rank wrote. `torchrun_command`
# (chapter 4.1) builds the `torchrun --standalone --nproc-per-node=2 scripts/06_1/fsdp_script.py
# ../runs/06_1` command line:

# %%
run_command([sys.executable, str(fsdp_script), str(RUNS)])
run_command(torchrun_command(str(fsdp_script), [str(RUNS)], nproc_per_node=2))
ranks = pd.DataFrame([json.loads(p.read_text()) for p in sorted(RUNS.glob("rank*_of_*.json"))])
ranks

# %% [markdown]
# Each FSDP rank holds a `(32, 64)` half of the `(64, 64)` weight, placed as `Shard(dim=0)`, and
# about half the bytes of the single process. And the learned weights are the same as one process's
# with the same global batch, within float32 rounding (PyTorch's own tolerances):

# %%
one, two = (torch.load(RUNS / f"weights_{n}.pt", weights_only=True) for n in (1, 2))
for key in one:
    torch.testing.assert_close(two[key], one[key], rtol=1.3e-6, atol=1e-5)
held = ranks[["parameters", "gradients", "optimizer"]].sum(axis=1)
ratio = held[ranks["world size"] == 2].max() / held[ranks["world size"] == 1].max()
assert ranks.loc[ranks["world size"] == 2, "local shape"].tolist() == [[32, 64], [32, 64]]
assert ratio <= 0.6
print(f"max |difference| {max((one[k] - two[k]).abs().max().item() for k in one):.1e}; "
      f"bytes per FSDP rank / one full copy = {ratio:.3f}")

# %% [markdown]
# ## A model too big to build: the meta device, `to_empty`, a full state dict
# The script above builds the whole model on every rank and only then shards it: for a moment each
# rank holds all of it, which a model that does not fit one device cannot afford. Built under
# `torch.device("meta")`, a module gets parameters with shapes and dtypes but no storage, so a layer of
# 2.5 B parameters costs nothing to build:

# %%
start = time.perf_counter()
with torch.device("meta"):
    huge = nn.Linear(50_000, 50_000)  # 10 GB of float32, if it were allocated
built_in = time.perf_counter() - start
assert huge.weight.is_meta and huge.weight.shape == (50_000, 50_000)
print(f"{huge.weight.numel() / 1e9:.1f} B parameters on {huge.weight.device}, "
      f"{huge.weight.numel() * 4 / GB:.0f} GB if allocated, built in {built_in * 1e3:.1f} ms")

# %% [markdown]
# Three steps turn such a model into a trainable one. `fully_shard` needs only the shapes, so it cuts
# the meta model into `Shard(0)` pieces; `model.to_empty(device=...)` allocates this rank's shards,
# *uninitialised* (they hold whatever the memory held); and each layer's `reset_parameters()`, the
# method its `__init__` calls, fills them. In one process, without sharding, the first three values of
# a weight after each step:

# %%
torch.manual_seed(0)
with torch.device("meta"):
    small = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 6))
small.to_empty(device="cpu")  # allocated, not initialised
print("after to_empty:        ", small[0].weight[0, :3].tolist())
for module in small.modules():
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()  # what each layer's __init__ does
print("after reset_parameters:", small[0].weight[0, :3].tolist())

# %% [markdown]
# With the same seed that is exactly the model an ordinary build makes: building on the meta device drew
# no random numbers, and `reset_parameters` draws them in the same order as `__init__` would have:

# %%
torch.manual_seed(0)
eager = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 6))
assert all(torch.equal(a, b) for a, b in zip(small.parameters(), eager.parameters(), strict=True))
print("meta + to_empty + reset_parameters == an ordinary build, both with seed 0")

# %% [markdown]
# The other way to fill the shards is the one a model too big for one device usually takes: a **full
# state dict** (a pretrained model, or one saved with `torch.save`) that only rank 0 reads.
# `set_model_state_dict(model, full_sd, options=StateDictOptions(full_state_dict=True,
# broadcast_from_rank0=True))` broadcasts it one tensor at a time, and each rank keeps only its shard
# of each tensor; the other ranks pass `{}`. So the whole model exists only once, in rank 0's CPU
# memory, which is usually much larger than a GPU's.

# %% [markdown]
# ## Accumulating and clipping sharded gradients
# Two more idioms of a training loop change under FSDP:
#
# - **Gradient accumulation.** A global batch too big for memory is split into micro-batches whose
#   gradients add up before one optimizer step. Every FSDP `backward()` would also reduce-scatter;
#   `model.set_requires_gradient_sync(False)` skips that (FSDP2's version of DDP's `no_sync()`), and
#   `set_requires_gradient_sync(True)` before the last micro-batch reduce-scatters the sum. In between,
#   each rank keeps the *unsharded* gradient of every unit (`unsharded_accumulated_grad` in torch's
#   `FSDPParam`): fewer collectives, for the memory of a whole gradient. Where that does not fit, sync
#   on every micro-batch and let the sharded gradients add up instead.
# - **Gradient clipping.** `clip_grad_norm_` scales all gradients by `max_norm / total norm`, and the
#   total norm is over *all* of them, while each rank holds only its shards. On DTensors,
#   `torch.nn.utils.clip_grad_norm_` computes the full gradient's norm (the shards' squared norms,
#   summed over the ranks), so every rank clips by the same factor; a norm of the local shards alone
#   would differ from rank to rank.
#
# In one process, two half-batches whose losses are each divided by 2 give the whole batch's gradient,
# because `backward()` adds into `.grad`:

# %%
gen = torch.Generator().manual_seed(1)
images, labels = torch.randn(16, 64, generator=gen), torch.randint(0, 6, (16,), generator=gen)
nn.functional.cross_entropy(eager(images), labels).backward()
whole = [p.grad.clone() for p in eager.parameters()]
eager.zero_grad()
for x, y in zip(images.chunk(2), labels.chunk(2), strict=True):
    (nn.functional.cross_entropy(eager(x), y) / 2).backward()  # adds into .grad
gap = max((p.grad - w).abs().max().item() for p, w in zip(eager.parameters(), whole, strict=True))
assert gap < 1e-6
print(f"max |accumulated - whole batch| = {gap:.1e}")

# %% [markdown]
# ## The three, on 2 FSDP ranks
# The script `scripts/06_1/fsdp_idioms.py` does all three in one `torchrun` launch. It takes `build_model`
# from `fsdp_script.py` beside it (torchrun puts a script's folder on `sys.path`), builds it on the meta
# device, shards it and allocates the shards; initialises them with `reset_parameters`; then loads
# rank 0's full state dict; accumulates two micro-batches per rank; and clips. Each rank also builds the
# one-process model, unsharded (it is tiny), and reports how far the sharded one is from it:

# %%
idioms_script = Path("scripts/06_1/fsdp_idioms.py")
show_file(idioms_script)

# %% [markdown]
# One launch on 2 processes; each rank's report is a column:

# %%
run_command(torchrun_command(str(idioms_script), [str(RUNS)], nproc_per_node=2))
report = pd.DataFrame([json.loads(p.read_text()) for p in sorted(RUNS.glob("idioms_rank*.json"))])
report = report.set_index("rank")
report.T

# %% [markdown]
# Row by row, checked (`report` has one row per rank):

# %%
assert report["loaded: max |w - one process|"].eq(0).all()  # a copy: exactly one process's weights
assert report["no sharded grad until the last"].all()  # set_requires_gradient_sync(False) held them back
assert report[["accumulated: max |g - one batch|", "clipped: max |g - one process|"]].max().max() < 1e-6
totals = report["clip_grad_norm_: total norm"]
assert (totals - report["one process: total norm"]).abs().max() < 1e-6 and totals.min() > 0.1  # it clipped
assert (report["norm of the local shards"] < totals).all()  # a local norm is not the norm
assert report["reset: rows 0-31 == rows 32-63"].all()  # see below
print(f"total norm {totals[0]:.4f} on both ranks and in one process; local norms "
      f"{report['norm of the local shards'].round(4).tolist()}")

# %% [markdown]
# - **Loaded**: the sharded model holds exactly the one-process weights (difference 0): the shards are
#   copies of rank 0's tensors.
# - **Accumulated**: before the last micro-batch no sharded gradient existed yet, and after it each rank's
#   shard of the gradient is the one-batch gradient's, within float32 rounding: two ranks × two
#   micro-batches of 4, each loss divided by 2, averaged by the reduce-scatter, is the mean over 16.
# - **Clipped**: `clip_grad_norm_` returned the same total norm on both ranks, the one-process norm, and
#   clipped to the same gradients; the norm of a rank's own shards is smaller, and different on each.
# - **Reset**: `reset_parameters` on the shards gave rows 0–31 (rank 0's shard) equal to rows 32–63
#   (rank 1's). Both ranks were seeded alike and each drew its `(32, 64)` shard from the start of the
#   same random stream. DTensor's random operators are meant to give each shard its own part of one
#   stream; on a CPU device mesh they do not (torch warns "DTensor random operators may not have complete
#   support on cpu device mesh"). A fresh start on CPU ranks therefore needs another seed on each rank
#   (distinct shards, though not one process's weights) or, to equal one process exactly, a full state
#   dict from rank 0.

# %% [markdown]
# ## Going further: the same in `common`, with the hardening
# `common.fsdp.meta` holds both ways of filling the shards. `materialize` is `to_empty` plus the
# `reset_parameters` loop, with one check first: a module that holds parameters or buffers of its own
# but has no `reset_parameters` would keep whatever the memory held, so it is refused, by name, before
# anything is allocated:

# %% tags=["hide-output"]
show_source(materialize)

# %% [markdown]
# The usual culprit is a small module of one's own, such as a learned gain set to ones in `__init__`:

# %%
class Gain(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(features))  # set here, and in no reset_parameters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


with torch.device("meta"):
    gained = nn.Sequential(nn.Linear(64, 64), Gain(64))
try:
    materialize(gained, "cpu")
except ValueError as error:
    print(error)
assert gained[1].gain.is_meta  # refused before anything was allocated

# %% [markdown]
# `load_full_state_dict(model, full_sd)` is the broadcast load (the other ranks pass `None`). Rank 0
# first compares the dict's names and shapes with the model's and sends its verdict to every rank, so a
# dict that does not fit raises the same `ValueError` on all of them, naming the keys. Without the
# check, rank 0 fails inside the broadcast with an error that names no key, and the other ranks learn of
# it only when rank 0's exit closes their connections (seen with torch 2.14; `common`'s check on 2 ranks
# is tested in `tests/system/test_fsdp_meta_processes.py`). In one process, a dict that lacks a bias:

# %%
try:
    load_full_state_dict(small, {k: v for k, v in eager.state_dict().items() if k != "2.bias"},
                         source="eager's state dict")
except ValueError as error:
    print(error)

# %% tags=["hide-output"]
show_source(load_full_state_dict)

# %% [markdown]
# `common.fsdp.train --grad-accum K` accumulates through `gradient_sync`, one switch for both
# strategies: `set_requires_gradient_sync` under FSDP2, `no_sync()` under DDP. It does not clip; a
# `clip_grad_norm_` between the last micro-batch's backward and `optimizer.step()` works unchanged on
# the sharded parameters, as the script showed.

# %% tags=["hide-output"]
show_source(gradient_sync)

# %% [markdown]
# ## Going further: three knobs, `reshard_after_forward`, prefetching, `MixedPrecisionPolicy`
# - `fully_shard(block, reshard_after_forward=True)` frees a unit's gathered parameters right after its
#   forward and gathers them again in backward: ZeRO-3. `False` keeps them until backward — more memory,
#   one all-gather fewer per unit (ZeRO-2-like). The default, `None`, means `True` for every unit and
#   `False` for the root, since backward needs the root's parameters first. `shard_model` (below) passes
#   its `reshard_after_forward` to the units only and leaves the root at `None`: torch's choice.
# - **Prefetching**: FSDP2 issues the all-gather of the next unit while the current one computes
#   (implicitly, on its own CUDA streams); `unit.set_modules_to_forward_prefetch([...])` prefetches
#   further ahead. On a CPU with gloo nothing overlaps, so this is a GPU matter.
# - `MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)` all-gathers and
#   computes in bf16 while the sharded master weights and the gradient reduction stay in float32.
#   NCCL and bf16 are GPU-only here; the next cell skips on a CPU with a message.

# %%
if device.type == "cuda":
    from torch.distributed.fsdp import MixedPrecisionPolicy
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    print("on a GPU run: torchrun --standalone --nproc_per_node=2 -m common.fsdp.train --bf16", policy)
else:
    print("skipped: bf16 MixedPrecisionPolicy and NCCL need CUDA GPUs (none here)")

# %% [markdown]
# ## Going further: the same script grown up, `common.fsdp.train`
# `python -m common.fsdp.train --strategy fsdp|ddp` trains Chapter 4's `SmallCNN` (with GroupNorm, so any
# number of ranks computes the same gradient) on the shapes data with either strategy, and adds
# distributed checkpoints (next notebook), `--compile`, logging and restarts. Its sharding step is
# `shard_model`: every layer with weights becomes a unit, bottom-up, then the root:

# %% tags=["hide-output"]
print(inspect.getsource(shard_model).split('"""')[0] + inspect.getsource(shard_model).split('"""')[2])

# %% [markdown]
# ## FSDP vs DDP, measured side by side
# `common.fsdp.bench` (`make bench-fsdp`) trains the same model with each strategy on 2 CPU ranks, one
# thread each, and reports samples/s and the bytes of parameters + gradients + optimizer state that a
# rank holds, counted from its local tensors. A short run here (`BENCH_STEPS` steps); [docs/figures.md](../docs/figures.md) has the longer one.

# %%
result = pd.DataFrame(compare(BenchConfig(repeats=1, steps=BENCH_STEPS))).T
assert result.loc["fsdp/ddp", "bytes_per_rank"] <= 0.6
result

# %%
fig, axes = plt.subplots(1, 2, figsize=(8, 3))
for ax, column, label in zip(axes, ["samples_per_s", "bytes_per_rank"],
                             ["samples/s (2 ranks)", "bytes per rank"], strict=True):
    ax.bar(["DDP", "FSDP"], result.loc[["ddp", "fsdp"], column], color=["tab:blue", "tab:orange"])
    ax.set_title(label)
fig.tight_layout()
read_figure("06_1/fsdp-vs-ddp-samples", result.loc["fsdp/ddp", "samples_per_s"], unit="×",
            what=f"FSDP's samples/s against DDP's, {BenchConfig().ranks} CPU ranks, a short run")
print(f"bytes per rank, FSDP / DDP: {result.loc['fsdp/ddp', 'bytes_per_rank']:.2f}× (counted, on any machine)")

# %% [markdown]
# The two ratios printed above are of different kinds. Bytes per rank are counted from the local
# tensors: FSDP holds half of DDP's on 2 ranks, on any machine. Samples/s are timed, and a short run on
# 2 CPU ranks of a small machine shared with other work moves a lot from run to run, either way (the
# longer `make bench-fsdp` run in [docs/figures.md](../docs/figures.md) measured FSDP at 0.70× DDP's
# speed). What does not move is the work: per step FSDP all-gathers every unit in forward and again in
# backward and reduce-scatters every unit's gradients, where DDP sends one bucketed all-reduce — at this
# size, where the computation is tiny, that extra communication usually costs time, while each FSDP rank
# updates only half of the AdamW state. On GPUs with NCCL the gathers overlap with compute, and for a
# model that does not fit one GPU there is no DDP number to compare against.

# %% [markdown]
# ## Summary
# - DDP replicates parameters, gradients and optimizer state: 16 bytes per parameter per rank with AdamW.
# - ZeRO-1/2/3 shard optimizer state, then gradients, then parameters; FSDP2's `fully_shard` is ZeRO-3.
# - `fully_shard` per block and on the root turns parameters into `Shard(0)` DTensors; build the
#   optimizer afterwards.
# - 2 FSDP ranks with global batch `B` learn what 1 process with batch `B` learns, within float32 rounding.
# - Measured from local shards, a rank holds about `1/N` of the bytes; the cost is communication per unit.
# - A model too big for one device: build it on `torch.device("meta")`, `fully_shard` it, `to_empty`,
#   then fill it from rank 0's full state dict (`set_model_state_dict(..., broadcast_from_rank0=True)`);
#   accumulate with `set_requires_gradient_sync(False)`, and clip with `clip_grad_norm_`, which takes
#   the norm of the whole sharded gradient.

# %% [markdown]
# ## Further reading
# - [Getting started with FSDP2](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html): `fully_shard`, DTensor parameters, meta-device initialisation, prefetching and mixed precision, on GPUs.
# - [`torch.distributed.fsdp.fully_shard`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html): every argument of `fully_shard`, `MixedPrecisionPolicy` and the module methods (`set_requires_gradient_sync`, `set_modules_to_forward_prefetch`).
# - [DTensor](https://pytorch.org/docs/stable/distributed.tensor.html): placements (`Shard`, `Replicate`), `to_local` and `full_tensor`, as printed by the script.
# - [`torchrun` (elastic launch)](https://pytorch.org/docs/stable/elastic/run.html): the launcher's options used here and in Chapter 6.4.
# - [ZeRO: memory optimizations toward training trillion parameter models](https://arxiv.org/abs/1910.02054): the paper behind the three stages of the first table.

# %% [markdown]
# ## Exercises
# 1. Change the script to `fully_shard(model)` only (no per-block units). What do the printed
#    placements show, and what would it cost in peak memory on a GPU?
# 2. Run the script on 3 processes. The layers have 64 rows: how does FSDP shard a dimension that
#    does not divide by 3? (Look at the local shapes on each rank.)
# 3. Use `bytes_per_rank` to find the smallest number of ranks on which a 7B model fits in 80 GB per
#    rank (parameters, gradients, AdamW state) under ZeRO-1, ZeRO-2 and ZeRO-3.
# 4. In `scripts/06_1/fsdp_idioms.py`, compute the total gradient norm by hand from the local shards (square, sum,
#    `dist.all_reduce`, square root) and check that it equals what `clip_grad_norm_` returned.
# 5. Call `torch.manual_seed(rank)` before the `reset_parameters` loop of `scripts/06_1/fsdp_idioms.py`. Are the two
#    halves of the weight still equal? Is the model then one process's?
# 6. The graded exercises: [`exercises/ex06_fsdp_checkpoints.ipynb`](exercises/ex06_fsdp_checkpoints.ipynb).

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. How many bytes per parameter does AdamW training in float32 keep, and what does that mean for a 7B model under DDP and under ZeRO-3 on 8 ranks?
# 2. What do ZeRO stages 1, 2 and 3 shard, and which one is FSDP's `fully_shard`?
# 3. What is the communication price of sharding the parameters, compared with DDP's?
# 4. What does `fully_shard` turn a parameter into, why is the optimizer built after it, and what did the 2-rank script show?
# 5. How do you build a model too big for one device, and what are the three steps that make it trainable?
# 6. On 2 CPU ranks, `reset_parameters` on the shards gave rows 0–31 equal to rows 32–63. Why, and what gives one process's weights instead?
# 7. How does a full state dict reach the shards when only rank 0 reads it, and what does `common.fsdp.meta.load_full_state_dict` add?
# 8. How do you accumulate gradients over micro-batches under FSDP2, and what does it cost in memory?
# 9. Why is `clip_grad_norm_` on sharded gradients not a local matter, and what did the 2-rank report show?
# 10. What did the side-by-side FSDP/DDP benchmark on 2 CPU ranks measure, and which of its two ratios holds on any machine?
