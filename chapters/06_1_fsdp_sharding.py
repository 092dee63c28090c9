# %% [markdown]
# # Chapter 6.1 — Sharding the model: FSDP2 on CPU processes
# **Guide sections:** beyond the guide — relates to §2.1 数据管道的概念与重要性 and the title's 大规模深度学习
# (large-scale training): §2.1 says why the pipeline matters; at scale, what each process must *hold*
# decides what can be trained at all.
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - What DDP replicates on every rank (parameters, gradients, AdamW state) and what ZeRO stages 1–3 shard
# - FSDP2's `fully_shard`, written in a script in this notebook: per block and on the root, with
#   DTensor placements and local shard shapes printed by each of 2 ranks
# - That 2 FSDP ranks with a global batch `B` learn the same weights as 1 process with batch `B`
# - Bytes per rank measured from the local shards, and samples/s, FSDP vs DDP side by side
# - `reshard_after_forward`, prefetching and `MixedPrecisionPolicy` — and `common.fsdp.train`, the same script grown up

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
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch

from common import get_device, seed_everything
from common.ddp.launch import run_command
from common.fsdp.bench import BenchConfig, compare
from common.fsdp.sharding import bytes_per_rank, shard_model
from common.models import SmallCNN, count_parameters

seed_everything(0)
device = get_device()
RUNS = Path("../runs/06_1")
shutil.rmtree(RUNS, ignore_errors=True)
RUNS.mkdir(parents=True)
print("device:", device, "| runs in", RUNS)

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
# The script below is Chapter 4's recipe with one change of substance: instead of `DDP(model)`, call
# `fully_shard` on each block (bottom-up) and then on the root. Every parameter becomes a `DTensor`
# whose placement `Shard(0)` says "split along dimension 0 across the ranks"; the optimizer is built
# *after* sharding, so it only ever sees — and keeps state for — the local shards. Under plain
# `python` (no `RANK` in the environment) it runs unsharded, as one process.

# %%
# %%writefile ../runs/06_1/fsdp_script.py
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


def build_model() -> nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank
    blocks = [nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(4)]
    return nn.Sequential(*blocks, nn.Linear(64, 6))


def local_bytes(tensors) -> int:
    return sum((t.to_local() if isinstance(t, DTensor) else t).nbytes for t in tensors)


def main() -> None:
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")  # "nccl" on GPUs
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    model = build_model()
    if distributed:
        for block in model[:-1]:
            fully_shard(block)  # one unit: gathered before its forward, freed after
        fully_shard(model)      # the root: the head, and the hooks that drive the units
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    images, labels = torch.randn(16, 64, generator=gen), torch.randint(0, 6, (16,), generator=gen)
    for _step in range(3):  # global batch 16: each rank takes its chunk
        x, y = images.chunk(world_size)[rank], labels.chunk(world_size)[rank]
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()  # reduce-scatter of the gradients
        optimizer.step()                                      # on the local shards only
    weight = model[0][0].weight
    held = {"parameters": local_bytes(p.data for p in model.parameters()),
            "gradients": local_bytes(p.grad for p in model.parameters()),
            "optimizer": local_bytes(v for s in optimizer.state.values() for v in s.values())}
    local_shape = tuple((weight.to_local() if isinstance(weight, DTensor) else weight).shape)
    report = {"rank": rank, "world size": world_size, "weight type": type(weight).__name__,
              "global shape": tuple(weight.shape), "placements": str(getattr(weight, "placements", "-")),
              "local shape": local_shape, **held}
    with open(os.path.join(os.path.dirname(__file__), f"rank{rank}_of_{world_size}.json"), "w") as f:
        json.dump(report, f)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))
    if rank == 0:  # the full weights, gathered from the shards
        torch.save(state, os.path.join(os.path.dirname(__file__), f"weights_{world_size}.pt"))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

# %% [markdown]
# Run it once as one process and once with `torchrun` on 2 processes (gloo), as subprocesses, and
# collect what each rank printed:

# %%
script = str(RUNS / "fsdp_script.py")
run_command([sys.executable, script])
run_command([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", script])
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
# ## Three knobs: `reshard_after_forward`, prefetching, `MixedPrecisionPolicy`
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
# ## The same script grown up: `common.fsdp.train`
# `python -m common.fsdp.train --strategy fsdp|ddp` trains Chapter 4's `SmallCNN` (with GroupNorm, so any
# number of ranks computes the same gradient) on the shapes data with either strategy, and adds
# distributed checkpoints (next notebook), `--compile`, logging and restarts. Its sharding step is
# `shard_model`: every layer with weights becomes a unit, bottom-up, then the root:

# %%
print(inspect.getsource(shard_model).split('"""')[0] + inspect.getsource(shard_model).split('"""')[2])

# %% [markdown]
# ## FSDP vs DDP, measured side by side
# `common.fsdp.bench` (`make bench-fsdp`) trains the same model with each strategy on 2 CPU ranks, one
# thread each, and reports samples/s and the bytes of parameters + gradients + optimizer state that a
# rank holds, counted from its local tensors. A short run here; [docs/figures.md](../docs/figures.md) has the longer one.

# %%
result = pd.DataFrame(compare(BenchConfig(repeats=1, steps=6))).T
assert result.loc["fsdp/ddp", "bytes_per_rank"] <= 0.6
result

# %%
fig, axes = plt.subplots(1, 2, figsize=(8, 3))
for ax, column, label in zip(axes, ["samples_per_s", "bytes_per_rank"],
                             ["samples/s (2 ranks)", "bytes per rank"], strict=True):
    ax.bar(["DDP", "FSDP"], result.loc[["ddp", "fsdp"], column], color=["tab:blue", "tab:orange"])
    ax.set_title(label)
fig.tight_layout()
print(f"FSDP / DDP on these {BenchConfig().ranks} CPU ranks: samples/s "
      f"{result.loc['fsdp/ddp', 'samples_per_s']:.2f}x, bytes per rank {result.loc['fsdp/ddp', 'bytes_per_rank']:.2f}x")

# %% [markdown]
# The two ratios printed above are of different kinds. Bytes per rank are counted from the local
# tensors: FSDP holds half of DDP's on 2 ranks, on any machine. Samples/s are timed, and a 6-step run on
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

# %% [markdown]
# ## Exercises
# 1. Change the script to `fully_shard(model)` only (no per-block units). What do the printed
#    placements show, and what would it cost in peak memory on a GPU?
# 2. Run the script on 3 processes. The layers have 64 rows: how does FSDP shard a dimension that
#    does not divide by 3? (Look at the local shapes on each rank.)
# 3. Use `bytes_per_rank` to find the smallest number of ranks on which a 7B model fits in 80 GB per
#    rank (parameters, gradients, AdamW state) under ZeRO-1, ZeRO-2 and ZeRO-3.
# 4. The graded exercises: [`exercises/ex06_fsdp_checkpoints.ipynb`](exercises/ex06_fsdp_checkpoints.ipynb).
