# %% [markdown]
# # Chapter 6.3 — `torch.compile` and resumable loaders
# **Guide sections:** beyond the guide — the title's 大规模深度学习 (large-scale training), and §2.1
# 数据管道的概念与重要性 once more: a faster training step makes the data pipeline the bottleneck again.
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - Compiling a training step on the CPU: compile time vs step time, and what a C++ compiler is needed for
# - Graph breaks, shown with `torch._dynamo.explain`
# - Why a faster step raises the data-wait fraction (Chapter 3's `DataWaitMeter`, before and after)
# - `torchdata`'s `StatefulDataLoader`: a mid-epoch `state_dict()` with workers, compared with the
#   position bookkeeping `common.ddp.train` does by hand, and stored in a DCP checkpoint (as
#   `common.fsdp.train` does)

# %% [markdown]
# ## Setup

# %%
import logging
import shutil
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from common import CustomImageDataset, ensure_data, get_device, seed_everything
from common.ddp.samplers import ResumableDistributedSampler
from common.fast.profiling import DataWaitMeter
from common.fsdp.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from common.transforms import V2EvalPreset

# Quiet, on purpose: torchdata 0.11 calls a deprecated torch API on every iterator, and Dynamo
# logs each graph break as a warning; the graph breaks are shown below with `explain` instead.
warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
seed_everything(0)
device = get_device()
data = ensure_data(verbose=False)
RUNS = Path("../runs/06_3")
shutil.rmtree(RUNS, ignore_errors=True)
print("device:", device, "| runs in", RUNS)

# %% [markdown]
# ## Compile time vs step time
# `torch.compile(model)` traces the Python code into graphs (TorchDynamo), derives a backward graph when
# gradients are needed (AOTAutograd), and generates fused kernels (TorchInductor): C++/OpenMP on a CPU
# — so a C++ compiler must be installed (`gcc`/`clang`; on Windows MSVC) — and Triton on GPUs. The
# first call pays for all of it. To keep this notebook short we compile the forward step of a small MLP
# on 32 px images (one graph); a training step adds a backward graph and compiles about twice as long.

# %%
def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 256), nn.ReLU(), nn.Linear(256, 6))


def train_step(model, optimizer, images, labels) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss.item()


model = make_model()
images = torch.randn(64, 3, 32, 32)
timings, outputs = {}, {}
for name, forward in (("eager", model), ("compiled", torch.compile(model))):
    times = []
    with torch.no_grad():
        for _ in range(12):
            start = time.perf_counter()
            outputs[name] = forward(images)
            times.append(time.perf_counter() - start)
    timings[name] = {"first call (s)": times[0],
                     "later calls (ms, median)": 1e3 * sorted(times[2:])[len(times[2:]) // 2]}
torch.testing.assert_close(outputs["compiled"], outputs["eager"], rtol=1e-4, atol=1e-5)
timings = pd.DataFrame(timings).T
print(f"compiling cost {timings.loc['compiled', 'first call (s)']:.1f} s = "
      f"{1e3 * timings.loc['compiled', 'first call (s)'] / timings.loc['eager', 'later calls (ms, median)']:.0f}"
      " eager calls")
timings.round(3)

# %% [markdown]
# The first compiled call takes seconds (tracing and C++ compilation; a cache under `/tmp` makes the
# next run of this notebook faster), the cost of hundreds of eager calls; later calls compute the same
# outputs, and on a model this small there is little to fuse, so they are not much faster, if at all.
# Compilation pays off for long runs of large models, on GPUs most. With DDP, `torch.compile(ddp_model)`
# splits the graph at the gradient buckets so the all-reduces still overlap; with FSDP2, compile the
# model after `fully_shard` (`common.fsdp.train --compile` does either).

# %% [markdown]
# ## Graph breaks, made visible
# Dynamo captures what it can and falls back to Python for the rest: each fallback is a *graph break*,
# splitting one graph into several. A data-dependent Python `if` on a tensor value is a classic:

# %%
def step_with_branch(x: torch.Tensor) -> torch.Tensor:
    y = model(x)
    if y.sum().item() > 0:  # Python needs the value now: the graph breaks here
        y = y * 2
    return y.relu()


explanation = torch._dynamo.explain(step_with_branch)(images)
assert explanation.graph_break_count >= 1
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}")
print("first reason:", explanation.break_reasons[0].reason.splitlines()[0])

# %% [markdown]
# ## A faster step makes the loader the bottleneck again
# Chapter 3's `DataWaitMeter` measures the share of each iteration spent waiting for the next batch.
# The guide's pipeline (decode a JPEG, transform, in the training process) feeds the MLP's training
# step. From the measured wait `w` and compute `c` per step, the data-wait fraction is `w / (w + c)`;
# a step made `k` times faster (by compilation, a GPU, ...) moves it to `w / (w + c / k)`:

# %%
dataset = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"),
                             V2EvalPreset(resize_size=32, crop_size=32), num_classes=len(data.classes))
loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=0)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
meter = DataWaitMeter()
for batch_index, (batch_images, batch_labels) in enumerate(meter.wrap(loader)):
    train_step(model, optimizer, batch_images, batch_labels)
    if batch_index == 5:
        break
counted = slice(1, len(meter.steps))  # what DataWaitMeter counts: not the first batch, not the unfinished last
waits = meter.waits[counted]
wait = sum(waits) / len(waits)
compute = sum(step - w for step, w in zip(meter.steps[counted], waits, strict=True)) / len(waits)
fractions = pd.Series({f"step {k}x faster": wait / (wait + compute / k) for k in (1, 2, 4, 10)},
                      name="data-wait fraction")
assert 0 < meter.fraction < 1 and fractions.is_monotonic_increasing
print(f"measured: wait {1e3 * wait:.0f} ms, compute {1e3 * compute:.0f} ms per step; "
      f"DataWaitMeter says {meter.fraction:.2f}")
fractions.round(3)

# %%
fig, ax = plt.subplots(figsize=(5, 2.5))
ax.bar(fractions.index, fractions.values, color="tab:orange")
ax.set_ylim(0, 1)
ax.set_ylabel("data-wait fraction")
fig.tight_layout()

# %% [markdown]
# With decoding in the training process the loop already waits for most of each step, and any speed-up
# of the step raises that share further: the faster the model, the more the pipeline matters. The cure
# is Chapter 3's: workers, a uint8 cache, batched fetches.

# %% [markdown]
# ## Resumable loaders: `StatefulDataLoader`
# `common.ddp.train` (Chapter 4) resumes mid-epoch by bookkeeping: it saves `(epoch, batch_in_epoch)` and
# restarts its `ResumableDistributedSampler` with `set_epoch(epoch, start=batch_in_epoch * batch_size)`.
# torchdata's `StatefulDataLoader` is a drop-in `DataLoader` with `state_dict()` / `load_state_dict()` that
# does this for any sampler — including the workers' progress and their prefetched batches:

# %%
numbers = TensorDataset(torch.arange(40))


def stateful(generator_seed: int = 0) -> StatefulDataLoader:
    return StatefulDataLoader(numbers, batch_size=4, shuffle=True, num_workers=2,
                              generator=torch.Generator().manual_seed(generator_seed))


loader = stateful()
iterator = iter(loader)
seen = [next(iterator)[0].tolist() for _ in range(3)]
state = loader.state_dict()  # mid-epoch, with two workers running
rest = [batch[0].tolist() for batch in iterator]
resumed = stateful(generator_seed=99)  # another seed: the state decides the order
resumed.load_state_dict(state)
assert [batch[0].tolist() for batch in resumed] == rest
print("first 3 batches:", seen, "\nresumed run continues with:", rest[0], "...")

# %% [markdown]
# The same by hand, the way `common.ddp.train` does it: skip the batches already consumed in this
# epoch's shuffled order. `common.fsdp.train` falls back to this when it resumes on another world size:
# a rank's loader state describes its shard of the epoch, which no rank of another world size has.

# %%
sampler = ResumableDistributedSampler(numbers, num_replicas=1, rank=0, shuffle=True, seed=0)
sampler.set_epoch(0)
full = [b[0].tolist() for b in DataLoader(numbers, batch_size=4, sampler=sampler)]
sampler.set_epoch(0, start=3 * 4)
assert [b[0].tolist() for b in DataLoader(numbers, batch_size=4, sampler=sampler)] == full[3:]
print(f"{len(full)} batches per epoch; resumed at batch 3 -> {len(full) - 3} batches left")

# %% [markdown]
# A loader's state is small and picklable, so it travels in the distributed checkpoint with the model
# and the optimizer (as one of `save_checkpoint`'s `extra` values; under several ranks, each rank's
# loader state belongs under its own key — `common.fsdp.train` stores it as `extra.loader.rank<R>`):

# %%
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
save_checkpoint(RUNS / "ckpt", 3, model=model, optimizer=optimizer, extra={"loader": state})
template = {"loader": stateful().state_dict()}
restored = load_checkpoint(latest_checkpoint(RUNS / "ckpt"), model=model, optimizer=optimizer,
                           extra=template)
again = stateful(generator_seed=7)
again.load_state_dict(restored["loader"])
assert [batch[0].tolist() for batch in again] == rest
print("restored from", latest_checkpoint(RUNS / "ckpt").name, "- continues with", rest[0])

# %% [markdown]
# ## Summary
# - `torch.compile` traces, derives the backward and generates kernels; the first step pays seconds of
#   compilation (a C++ compiler on CPUs), later steps may be faster.
# - `torch._dynamo.explain` counts graphs and graph breaks and says why each break happened.
# - A faster step raises the data-wait fraction: measure it, then fix the pipeline (Chapter 3).
# - `StatefulDataLoader.state_dict()` resumes mid-epoch, workers included; the hand-made alternative is
#   a sampler that skips the consumed part of the epoch. Either way the state goes into the checkpoint.

# %% [markdown]
# ## Exercises
# 1. Replace the `if` in `step_with_branch` by `torch.where` and run `explain` again: how many graphs now?
# 2. Compile the whole `train_step` (forward, backward, optimizer) and time it as above: how much
#    longer does the first call take than the forward alone?
# 3. Take a loader state after 3 batches with `num_workers=2` and load it into a loader with
#    `num_workers=0`. Does it continue correctly?
# 4. The graded exercises: [`exercises/ex06_fsdp_checkpoints.ipynb`](exercises/ex06_fsdp_checkpoints.ipynb).
