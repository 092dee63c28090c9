# %% [markdown]
# # Chapter 6.3 — `torch.compile` and resumable loaders
# **Guide sections:** beyond the guide — the title's 大规模深度学习 (large-scale training), and §2.1
# 数据管道的概念与重要性 once more: a faster training step makes the data pipeline the bottleneck again.
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - Where `torch.compile` pays on a CPU (a chain of pointwise ops fused into one loop) and where it does
#   not (time already in oneDNN/MKL kernels): compile time vs call time, and what a C++ compiler is needed for
# - Graph breaks, shown with `torch._dynamo.explain`
# - Why a faster step raises the data-wait fraction (Chapter 3's `DataWaitMeter`, before and after)
# - `torchdata`'s `StatefulDataLoader`: a mid-epoch `state_dict()` with workers, compared with the
#   position bookkeeping `common.ddp.train` does by hand, and stored in a DCP checkpoint (as
#   `common.fsdp.train` does)

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/06_3_compile_and_resumable_loaders.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/06_3_compile_and_resumable_loaders.ipynb)
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
import logging
import shutil
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from common import CustomImageDataset, SmallCNN, ensure_data, get_device, seed_everything
from common.compilation import (
    chain_inputs,
    cpp_compiler,
    eager_vs_compiled,
    median_ms,
    pointwise_chain,
    time_by_layer_type,
)
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
# first call pays for all of it. First, is there a compiler for Inductor on this machine?

# %%
compiler = cpp_compiler()
print("C++ compiler for Inductor:",
      Path(compiler).name if compiler else "none found: every compiled timing below is skipped")

# %% [markdown]
# ### Where compilation pays: a chain of pointwise ops
# Eager PyTorch runs one kernel per operation, and each reads its whole input from memory and writes a
# whole new tensor back. `pointwise_chain` (in `common/compilation.py`) normalizes a batch of activations
# per channel, scales and shifts it, applies SiLU and halves the result: six operations, so six passes
# over the tensor. They are cheap arithmetic, so the time goes into moving memory. Inductor *fuses* the
# six into one loop: each element is read once, computed in registers, and written once. The compile
# time is reported apart from the per-call times, which are medians of alternating eager and compiled
# calls:

# %%
chain_args = chain_inputs(batch=32, channels=64, size=32)
if compiler:
    chain, eager_out, compiled_out = eager_vs_compiled(pointwise_chain, *chain_args)
    torch.testing.assert_close(compiled_out, eager_out)
    assert chain.speedup > 1.5, "one fused loop should beat six passes over memory"
    print(f"{chain_args[0].numel() * 4 / 1e6:.0f} MB of activations: eager {chain.eager_ms:.1f} ms "
          f"(six passes), compiled {chain.compiled_ms:.1f} ms (one loop): {chain.speedup:.1f}x faster, "
          f"after {chain.first_call_s:.1f} s of compiling")
else:
    print("skipped: no C++ compiler, so Inductor cannot build CPU kernels here")

# %% [markdown]
# ### Two small models
# A model is a different matter: much of its time may sit in kernels that are already as fast as they
# get. Two, on one batch of 64 images at 32 px, forward only (inference; a training step adds a
# backward graph and compiles about twice as long): a small MLP, whose work is two matrix products, and
# the course's `SmallCNN` (in eval mode), three convolutions each followed by BatchNorm, ReLU and
# max-pooling. Both are compiled and timed as the chain was:

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


model, cnn = make_model(), SmallCNN(len(data.classes)).eval()
images = torch.randn(64, 3, 32, 32)
cases = {"pointwise chain": chain} if compiler else {}
for name, net in (("MLP", model), ("SmallCNN", cnn)) if compiler else ():
    cases[name], eager_out, compiled_out = eager_vs_compiled(net, images)
    torch.testing.assert_close(compiled_out, eager_out, rtol=1e-4, atol=1e-5)
timings = pd.DataFrame({name: {"first call (s)": t.first_call_s, "eager (ms)": t.eager_ms,
                               "compiled (ms)": t.compiled_ms, "speed-up": t.speedup}
                        for name, t in cases.items()}).T
timings.round(3)

# %% [markdown]
# Why the speed-ups differ: where does each model's eager forward pass spend its time?
# `time_by_layer_type` times every layer with forward hooks and sums by kind. The compiled code calls
# the same oneDNN/MKL kernels for matrix products and convolutions that eager mode does; what it can
# change is everything around them — and, for convolutions, the memory layout it hands them:

# %%
shares = pd.DataFrame({"MLP": time_by_layer_type(model, images),
                       "SmallCNN": time_by_layer_type(cnn, images)}).fillna(0.0)
gemm, conv = shares.loc["Linear", "MLP"], shares.loc["Conv2d", "SmallCNN"]
assert gemm > 0.5, "the MLP's forward pass is mostly its two matrix products"
shares.round(3)

# %% [markdown]
# The verdicts, from these numbers. Removing all the time outside the library kernels would give at most
# `1 / share` (Amdahl's law); a speed-up beyond that means the kernels themselves ran faster. For
# convolutions that can happen: on a CPU with oneDNN (the default), Inductor hands the convolutions the
# channels-last layout (`decide_layout_opt` in `torch/_inductor/graph.py`). Eager mode can do that too — the last line
# times an eager SmallCNN converted with `.to(memory_format=torch.channels_last)`:

# %%
cnn_last = SmallCNN(len(data.classes)).eval().to(memory_format=torch.channels_last)
cnn_last.load_state_dict(cnn.state_dict())
last_ms = median_ms(cnn_last, images.contiguous(memory_format=torch.channels_last))
print(f"MLP: {gemm:.0%} of eager time in Linear (matrix products): compiling can win at most "
      f"{1 / gemm:.2f}x" + (f"; measured {cases['MLP'].speedup:.2f}x" if compiler else ""))
print(f"SmallCNN: {conv:.0%} in Conv2d, {1 - conv:.0%} around it (BatchNorm, pooling, ReLU): at most "
      f"{1 / conv:.1f}x from fusing alone" + (f"; measured {cases['SmallCNN'].speedup:.1f}x" if compiler else ""))
eager_ms = cases["SmallCNN"].eager_ms if compiler else median_ms(cnn, images)
print(f"SmallCNN, eager in channels-last: {last_ms:.1f} ms vs {eager_ms:.1f} ms: "
      f"{eager_ms / last_ms:.1f}x without compiling")

# %% [markdown]
# So the MLP is the case where compiling does not help: its time is the two matrix products, which run
# the same kernel either way, and there is one small ReLU to fuse — while every compiled call adds its
# own overhead (guard checks on the inputs), so at this size it can even be slower. SmallCNN can gain
# (its measured speed-up is above), for two reasons the lines above separate: its eager pass spends much of its time *around* the
# convolutions — BatchNorm, ReLU and max-pooling, each a full pass over the activations — which Inductor
# fuses, as in the pointwise chain; and its convolutions run faster in the channels-last layout, which
# eager mode gets with one `.to(memory_format=...)`. Either way the first call costs seconds of
# compiling (a cache under `/tmp` makes the next run of this notebook faster), which pays off only over
# many calls. With DDP, `torch.compile(ddp_model)` splits the graph at the gradient buckets so the
# all-reduces still overlap; with FSDP2, compile the model after `fully_shard`
# (`common.fsdp.train --compile` does either).

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
# does this for any sampler, workers included. Its state is a position, not data: how many batches were
# yielded, where the sampler is in this epoch's order (and its generator's state), and each worker's own
# state. Prefetched batches are not in it: the resumed loader fetches them again. Drawn from a run without
# workers:
#
# ![A loader stopped after step 3, resumed and restarted](figures/loader_resume.svg)
#
# *The state saved at step 3 is a position, not data: the resumed `StatefulDataLoader` (even with another seed) yields exactly the batches of the uninterrupted run from step 4 on, while a plain `DataLoader` starts the epoch over and repeats the first three.*
#
# The same with two workers, resumed in a loader with another seed:

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
# - `torch.compile` traces, derives the backward and generates kernels; the first call pays seconds of
#   compilation (a C++ compiler on CPUs). Later calls are faster where there is something to fuse
#   (chains of pointwise ops, normalization, pooling), not where the time is already in library
#   kernels (matrix products, convolutions): measure where the eager time goes first.
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

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. What does `torch.compile` do on the first call, and what does a CPU need for it?
# 2. Why was the compiled chain of pointwise operations so much faster than eager mode?
# 3. Compiling the small MLP did not help. Why, and which law gives the bound?
# 4. `SmallCNN` ran about 3.7× faster compiled. Which two reasons does the chapter separate, and how did it check the second?
# 5. What is a graph break, what causes the one in `step_with_branch`, and how do you see it?
# 6. Why does a faster training step raise the data-wait fraction, and what did the chapter measure?
# 7. What does a `StatefulDataLoader`'s `state_dict()` hold, and what does it not hold?
# 8. How does the hand-made alternative resume in the middle of an epoch, and when does `common.fsdp.train` fall back to it?
# 9. Where does a loader's state go in a checkpoint, and how is it stored with several ranks?
# 10. How do you combine `torch.compile` with DDP, and with FSDP2?
