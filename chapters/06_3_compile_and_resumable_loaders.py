# %% [markdown]
# # Chapter 6.3 — `torch.compile` and resumable loaders
# **Guide sections:** beyond the guide — the title's 大规模深度学习 (large-scale training), and §2.1
# 数据管道的概念与重要性 once more: a faster training step makes the data pipeline the bottleneck again.
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - `torch.compile`, called in this notebook: what its first call costs (cold, and with a warm cache) and
#   what later calls gain, on a chain of pointwise ops (fused into one loop) and on two small models
# - Where a model's gain really comes from, measured: time by layer type in both memory layouts, eager
#   and compiled
# - Graph breaks, shown with `torch._dynamo.explain` and with `TORCH_LOGS="graph_breaks"`
# - The compiled model in a training loop: its data-wait fraction measured against the eager one's
# - `torchdata`'s `StatefulDataLoader`: a mid-epoch `state_dict()` with workers, compared with the
#   position bookkeeping `common.ddp.train` does by hand, and stored in a DCP checkpoint (as
#   `common.fsdp.train` does)
#
# > **Prerequisites:** chapters 3.1 and 6.2 · **Time:** about 20 min to read, 3 min to run on a 2-core laptop · **Main path:** every section; the one titled "Going further" (graph breaks in the logs) is optional.

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
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn
from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from common import CustomImageDataset, SmallCNN, ensure_data, get_device, seed_everything
from common.ddp.samplers import ResumableDistributedSampler
from common.fast.profiling import DataWaitMeter
from common.fsdp.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from common.fsdp.compilation import (
    chain_inputs,
    compare_ms,
    cpp_compiler,
    pointwise_chain,
    time_by_layer_type,
)
from common.readings import read_figure
from common.source import show_file
from common.transforms import V2EvalPreset

# Quiet, on purpose: torchdata 0.11 calls a deprecated torch API on every iterator, and Dynamo
# logs each graph break as a warning; the graph breaks are shown below on purpose instead.
warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
seed_everything(0)
device = get_device()
data = ensure_data(verbose=False)
RUNS = Path("../runs/06_3")
shutil.rmtree(RUNS, ignore_errors=True)
print("device:", device, "| runs in", RUNS)

# %% tags=["parameters"]
# Sizes of this chapter's runs. `make test` runs the notebook with smaller ones (tests/notebook_parameters.py).
REPEATS = 15  # timed calls of each function in every eager/compiled comparison
TRAIN_STEPS = 20  # training steps of each model in the data-wait measurement

# %% [markdown]
# ## Compile time vs step time
# `torch.compile(model)` traces the Python code into graphs (TorchDynamo), derives a backward graph when
# gradients are needed (AOTAutograd), and generates fused kernels (TorchInductor): C++/OpenMP on a CPU
# — so a C++ compiler must be installed (`gcc`/`clang`; on Windows MSVC) — and Triton on GPUs. The
# first call pays for all of it. First, is there a compiler for Inductor on this machine?

# %%
compiler = cpp_compiler()
if compiler is None:
    raise RuntimeError("no C++ compiler found (g++, clang++ or $CXX): install one, then run this notebook again")
print("C++ compiler for Inductor:", Path(compiler).name)

# %% [markdown]
# ### Where compilation pays: a chain of pointwise ops
# Eager PyTorch runs one kernel per operation, and each reads its whole input from memory and writes a
# whole new tensor back. `pointwise_chain` (in `common/fsdp/compilation.py`) normalizes a batch of activations
# per channel, scales and shifts it, applies SiLU and halves the result: six operations, so six passes
# over the tensor. They are cheap arithmetic, so the time goes into moving memory. Inductor *fuses* the
# six into one loop: each element is read once, computed in registers, and written once.
#
# `torch.compile` returns at once: it compiles at the first call, for the shapes it sees. The cell
# compiles the chain, checks that both versions compute the same, and times them with `compare_ms`:
# the median of `REPEATS` calls of each, taken in turns, so that other work on the machine slows both alike.

# %%
chain_args = chain_inputs(batch=32, channels=64, size=32)
compiled_chain = torch.compile(pointwise_chain)  # nothing is compiled yet
with torch.no_grad():
    torch.testing.assert_close(compiled_chain(*chain_args), pointwise_chain(*chain_args))  # compiles here
chain_ms = compare_ms({"eager": pointwise_chain, "compiled": compiled_chain}, *chain_args, repeats=REPEATS)
print(f"{chain_args[0].numel() * 4 / 1e6:.0f} MB of activations: eager {chain_ms['eager']:.1f} ms "
      f"(six passes), compiled {chain_ms['compiled']:.1f} ms (one loop)")
chain_speedup = read_figure("06_3/chain-compiled-vs-eager", chain_ms["eager"] / chain_ms["compiled"],
                            unit="×", what="the pointwise chain, compiled against eager",
                            expect=(">=", 1.5))

# %% [markdown]
# ### The first call: cold and warm
# Inductor keeps what it built in a cache on disk (under the system's temporary folder unless
# `TORCHINDUCTOR_CACHE_DIR` says otherwise), so the cost of a first call depends on what an earlier run
# left there. The cell times it both ways: `torch._dynamo.reset()` makes this process forget every
# graph it compiled; the first `first_call_s` then runs in an empty cache of its own (cold: trace,
# generate the C++, build it), the second in the same cache (warm: traced again, the built kernel
# loaded from the cache):

# %%
def first_call_s(fn, *args) -> float:
    """Seconds of the first call of a fresh `torch.compile(fn)`."""
    torch._dynamo.reset()  # forget the graphs compiled so far in this process
    compiled = torch.compile(fn)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(*args)
    return time.perf_counter() - start


with tempfile.TemporaryDirectory() as cache, temporary_cache_dir(cache):
    cold = first_call_s(pointwise_chain, *chain_args)  # an empty cache: everything is built
    warm = first_call_s(pointwise_chain, *chain_args)  # the same cache: the kernel is found there
read_figure("06_3/chain-first-call-cold", cold, unit=" s",
            what="the chain's first compiled call, empty Inductor cache")
read_figure("06_3/chain-first-call-warm", warm, unit=" s",
            what="the chain's first compiled call, its kernel already in the cache")
print(f"every later call: {chain_ms['compiled']:.1f} ms; the cold first call is worth "
      f"{cold * 1e3 / (chain_ms['eager'] - chain_ms['compiled']):,.0f} calls' savings")

# %% [markdown]
# A cold first call costs seconds, most of it the C++ build; a warm one, a fraction of a second of
# tracing. A fresh Python process also pays once for importing the compiler's own modules, which this
# kernel did in the first compiled call above. Either way compiling pays off only over many calls,
# which a training run has.

# %% [markdown]
# ### Two small models
# A model is a different matter: much of its time may sit in kernels that are already as fast as they
# get. Two, on one batch of 64 images at 32 px, forward only (inference; a training step adds a
# backward graph and compiles about twice as long): a small MLP, whose work is two matrix products, and
# the course's `SmallCNN` (in eval mode), three convolutions each followed by BatchNorm, ReLU and
# max-pooling:

# %%
def make_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 256), nn.ReLU(), nn.Linear(256, 6))


mlp, cnn = make_mlp().eval(), SmallCNN(len(data.classes)).eval()
images = torch.randn(64, 3, 32, 32)
compiled_mlp, compiled_cnn = torch.compile(mlp), torch.compile(cnn)
with torch.no_grad():
    for eager, compiled in ((mlp, compiled_mlp), (cnn, compiled_cnn)):
        torch.testing.assert_close(compiled(images), eager(images), rtol=1e-4, atol=1e-5)
mlp_ms = compare_ms({"eager": mlp, "compiled": compiled_mlp}, images, repeats=REPEATS)
cnn_ms = compare_ms({"eager": cnn, "compiled": compiled_cnn}, images, repeats=REPEATS)
read_figure("06_3/mlp-compiled-vs-eager", mlp_ms["eager"] / mlp_ms["compiled"], unit="×",
            what="the MLP, compiled against eager")
read_figure("06_3/cnn-compiled-vs-eager", cnn_ms["eager"] / cnn_ms["compiled"], unit="×",
            what="SmallCNN, compiled against eager", expect=(">=", 1.5))
pd.DataFrame({"MLP": mlp_ms, "SmallCNN": cnn_ms}).T.add_suffix(" (ms)").round(2)

# %% [markdown]
# Why do the two differ? Where does each eager forward pass spend its time? `time_by_layer_type` times
# every layer with forward hooks and sums by kind. The compiled code calls the same oneDNN/MKL kernels
# for matrix products and convolutions that eager mode does; what it can change is everything around
# them:

# %%
shares = pd.DataFrame({"MLP": time_by_layer_type(mlp, images),
                       "SmallCNN": time_by_layer_type(cnn, images)}).fillna(0.0)
gemm = shares.loc["Linear", "MLP"]
print(f"MLP: {gemm:.0%} of its eager time in Linear (the matrix products): removing all the rest "
      f"would make it at most {1 / gemm:.2f}× faster (Amdahl's law)")
shares.round(3)

# %% [markdown]
# So the MLP is the case where compiling does not help: its time is the two matrix products, which run
# the same kernel either way, and there is one small ReLU to fuse — while every compiled call adds its
# own overhead (guard checks on the inputs), so at this size it can even be slower.
#
# SmallCNN is different: a good part of its eager time is *not* in the convolutions but in BatchNorm,
# ReLU and max-pooling (the table; on a quiet machine `MaxPool2d` alone takes half of it or more). Part of
# what the compiled model does differently is the memory layout: on a CPU with
# oneDNN, Inductor hands the convolutions the channels-last layout (`decide_layout_opt` in
# `torch/_inductor/graph.py`), so every layer after them works on channels-last tensors too. Eager mode
# can do that with one line, `.to(memory_format=torch.channels_last)`. To tell the layout from the
# fusion, the same weights in both layouts, each eager and compiled:

# %%
cnn_last = SmallCNN(len(data.classes)).eval().to(memory_format=torch.channels_last)
cnn_last.load_state_dict(cnn.state_dict())
images_last = images.contiguous(memory_format=torch.channels_last)
compiled_last = torch.compile(cnn_last)
with torch.no_grad():
    torch.testing.assert_close(compiled_last(images_last), cnn(images), rtol=1e-4, atol=1e-5)
variants = compare_ms({"eager, NCHW": lambda: cnn(images),
                       "eager, channels-last": lambda: cnn_last(images_last),
                       "compiled, NCHW": lambda: compiled_cnn(images),
                       "compiled, channels-last": lambda: compiled_last(images_last)}, repeats=REPEATS)
layouts = pd.DataFrame({"NCHW": time_by_layer_type(cnn, images),
                        "channels-last": time_by_layer_type(cnn_last, images_last)}).fillna(0.0)
print("ms per forward pass:", {name: round(ms, 2) for name, ms in variants.items()})
layouts.round(3).rename(columns=lambda layout: f"share of eager time, {layout}")

# %%
fig, ax = plt.subplots(figsize=(6, 2.4))
ax.barh(list(variants)[::-1], list(variants.values())[::-1],
        color=["tab:orange", "tab:orange", "tab:blue", "tab:blue"])
ax.set_xlabel("ms per forward pass (64 images, 32 px)")
ax.set_title("SmallCNN: eager (blue) and compiled (orange), in both layouts")
fig.tight_layout()

# %% [markdown]
# The attribution, from these numbers: the layout change alone (eager, nothing compiled), then what
# compiling adds on top of it (channels-last eager against channels-last compiled), and the share of
# eager time that `MaxPool2d` takes in each layout:

# %%
base = variants["eager, NCHW"]
layout_gain = read_figure("06_3/cnn-channels-last-eager", base / variants["eager, channels-last"], unit="×",
                          what="SmallCNN eager in channels-last against eager NCHW, nothing compiled")
fusion_gain = read_figure("06_3/cnn-compiled-over-channels-last",
                          variants["eager, channels-last"] / variants["compiled, channels-last"], unit="×",
                          what="the channels-last SmallCNN compiled, against it eager")
print(f"MaxPool2d: {layouts.loc['MaxPool2d', 'NCHW']:.0%} of the eager NCHW pass, "
      f"{layouts.loc['MaxPool2d', 'channels-last']:.0%} of the eager channels-last one; "
      f"BatchNorm2d + ReLU: {layouts.loc[['BatchNorm2d', 'ReLU'], 'channels-last'].sum():.0%} of it")
total = base / variants["compiled, channels-last"]
layout_part = math.log(layout_gain.value) / math.log(total) if total > 1 and layout_gain.value > 1 else 0.0
verdict = ("most of it is the layout" if layout_part > 0.6 else "most of it is the compiler" if layout_part < 0.4
           else "the layout and the compiler share it about evenly")
print(f"of the total {total:.1f}× (NCHW eager to channels-last compiled), the layout alone gives "
      f"{layout_gain.value:.1f}× and compiling then {fusion_gain.value:.1f}×: {verdict} "
      f"({layout_part:.0%} of the gain on a log scale is the layout's)")

# %% [markdown]
# Two mechanisms stack here, and the figures above separate them. The layout: PyTorch's CPU kernels for
# max-pooling and BatchNorm run much faster on channels-last tensors, so `MaxPool2d`'s share of the pass
# falls when the layout changes (the line above) — a gain that needs no compiler, and one that the
# compiled NCHW model gets too, because Inductor switches the layout itself. The fusion: compiling the
# channels-last model folds BatchNorm and ReLU into the loops around the convolutions and removes passes
# over memory between layers (the second figure). The last line says how this run splits the total
# between the two; the more of it the layout takes, the more a one-line change gets of what the compiler
# would. So before compiling a model, find out where its eager time goes.
#
# With DDP, `torch.compile(ddp_model)` splits the graph at the gradient buckets so that the all-reduces
# still overlap; with FSDP2, compile the model after `fully_shard` (`common.fsdp.train --compile` does
# either).

# %% [markdown]
# ## Graph breaks, made visible
# Dynamo captures what it can and falls back to Python for the rest: each fallback is a *graph break*,
# splitting one graph into several. A data-dependent Python `if` on a tensor value is a classic.
# `torch._dynamo.explain` runs a function under Dynamo and reports the graphs and the reason of each break:

# %%
def step_with_branch(x: torch.Tensor) -> torch.Tensor:
    y = mlp(x)
    if y.sum().item() > 0:  # Python needs the value now: the graph breaks here
        y = y * 2
    return y.relu()


explanation = torch._dynamo.explain(step_with_branch)(images)
assert explanation.graph_break_count >= 1
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}")
print("first reason:", explanation.break_reasons[0].reason.splitlines()[0])

# %% [markdown]
# ## Going further: graph breaks in the logs
# In a real training script one does not call `explain`; one runs the script with the environment
# variable `TORCH_LOGS="graph_breaks"`, and Dynamo logs each break where it happens, with the line of
# user code. The same branch, as a script of its own, `scripts/06_3/graph_break.py`:

# %%
graph_break_script = Path("scripts/06_3/graph_break.py")
show_file(graph_break_script)

# %% [markdown]
# Run as `TORCH_LOGS="graph_breaks" python scripts/06_3/graph_break.py`, in a process of its own. The
# cell prints the log records of the break, each without its prefix of time and process id:

# %%
logged = subprocess.run([sys.executable, str(graph_break_script)], capture_output=True, text=True,
                        env={**os.environ, "TORCH_LOGS": "graph_breaks"}, timeout=600, check=True)
records = [re.sub(r"^\S+ [\d:.]+ \d+ \S+\] \[[^\]]*\] \[__graph_breaks\] ?", "", line)
           for line in logged.stderr.splitlines() if "[__graph_breaks]" in line]
records = [re.sub(r"(/\S+?\.py)", lambda m: os.path.relpath(m[1]), line) for line in records]
assert any(line.startswith("Graph break in user code") for line in records)
print("\n".join(records[:records.index("User code traceback:")] if "User code traceback:" in records else records))

# %% [markdown]
# The log names the file and line, the reason (`Tensor.item()`: Python needs the value) and a hint. Where
# a break sits inside a training step, each break is a return to Python and a graph boundary that no
# fusion crosses; replacing the `if` with `torch.where` (Exercise 1) removes it.

# %% [markdown]
# ## A faster step makes the loader the bottleneck again
# Chapter 3's `DataWaitMeter` measures the share of each iteration spent waiting for the next batch.
# The guide's pipeline (decode a JPEG, transform, in the training process) feeds `SmallCNN`'s training
# step, `TRAIN_STEPS` steps, once eager and once compiled (the same loader, the same start weights; the
# compiled model's first step, which compiles the forward and the backward, is left out of the
# fraction as every first batch is):

# %%
dataset = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"),
                             V2EvalPreset(resize_size=32, crop_size=32), num_classes=len(data.classes))


def train_step(model, optimizer, images, labels) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss.item()


def measure_data_wait(model: nn.Module, steps: int) -> DataWaitMeter:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=0, drop_last=True,
                        generator=torch.Generator().manual_seed(0))
    meter = DataWaitMeter()
    for batch_index, (batch_images, batch_labels) in enumerate(meter.wrap(loader)):
        train_step(model, optimizer, batch_images, batch_labels)
        if batch_index == steps:
            break
    return meter


torch.manual_seed(0)
eager_model, twin = SmallCNN(len(data.classes)), SmallCNN(len(data.classes))
twin.load_state_dict(eager_model.state_dict())  # the same start weights
compiled_model = torch.compile(twin)
meters = {"eager": measure_data_wait(eager_model, TRAIN_STEPS),
          "compiled": measure_data_wait(compiled_model, TRAIN_STEPS)}
per_step = pd.DataFrame({name: {"waiting for data (ms)": 1e3 * m.wait_s / len(m.steps[1:]),
                                "computing (ms)": 1e3 * (m.total_s - m.wait_s) / len(m.steps[1:]),
                                "data-wait fraction": m.fraction} for name, m in meters.items()}).T
read_figure("06_3/train-step-compiled-vs-eager",
            per_step.loc["eager", "computing (ms)"] / per_step.loc["compiled", "computing (ms)"], unit="×",
            what="SmallCNN's training step (forward, backward, SGD) compiled against eager")
for name in meters:
    read_figure(f"06_3/data-wait-{name}", 100 * per_step.loc[name, "data-wait fraction"], unit="%",
                what=f"data-wait fraction of the {name} training loop, the guide's pipeline feeding it")
per_step.round(3)

# %%
fig, ax = plt.subplots(figsize=(7, 2.2))
ax.barh(per_step.index, per_step["waiting for data (ms)"], color="tab:orange", label="waiting for data")
ax.barh(per_step.index, per_step["computing (ms)"], left=per_step["waiting for data (ms)"],
        color="tab:blue", label="computing")
ax.invert_yaxis()  # eager on top
ax.set_xlabel("ms per training step")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
fig.tight_layout()

# %% [markdown]
# The loader's time per batch is the same in both loops (it does the same work). Where the compiled step
# computes faster (the first figure), the loop spends a larger share of its time waiting for data: the
# faster the model, the more the pipeline matters. The cure is Chapter 3's: workers, a uint8 cache,
# batched fetches.

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
model = make_mlp()
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
# - `torch.compile` traces, derives the backward and generates kernels at the first call: seconds with
#   an empty cache (a C++ build on CPUs), a fraction of a second with a warm one. Later calls are faster
#   where there is something to fuse (chains of pointwise ops), not where the time is already in library
#   kernels (matrix products).
# - Measure where the eager time goes before crediting the compiler: part of SmallCNN's gain is the
#   channels-last layout, which eager mode gets with one line; the chapter measured how much.
# - `torch._dynamo.explain` counts graphs and graph breaks; `TORCH_LOGS="graph_breaks"` logs each break
#   with its line of code.
# - A compiled, faster step raises the data-wait fraction of the same loader: measure it, then fix the
#   pipeline (Chapter 3).
# - `StatefulDataLoader.state_dict()` resumes mid-epoch, workers included; the hand-made alternative is
#   a sampler that skips the consumed part of the epoch. Either way the state goes into the checkpoint.

# %% [markdown]
# ## Further reading
# - [`torch.compile` documentation](https://pytorch.org/docs/stable/torch.compiler.html): the compiler's parts (Dynamo, AOTAutograd, Inductor), its backends and its troubleshooting pages.
# - [Introduction to `torch.compile`](https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html): the official tutorial, with the speed-ups and graph breaks seen here on a GPU.
# - [`torch._logging` and `TORCH_LOGS`](https://pytorch.org/docs/stable/logging.html): every log channel (`graph_breaks`, `recompiles`, `output_code`) and how to turn it on.
# - [Channels-last memory format tutorial](https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html): what `torch.channels_last` changes and which operators benefit.
# - [torchdata `StatefulDataLoader`](https://pytorch.org/data/beta/torchdata.stateful_dataloader.html): its `state_dict()` and `load_state_dict()`, with workers and custom samplers.

# %% [markdown]
# ## Exercises
# 1. Replace the `if` in `step_with_branch` by `torch.where` and run `explain` again: how many graphs now?
# 2. Compile the whole `train_step` (forward, backward, optimizer) and time its first call cold, as
#    `first_call_s` does for the chain: how much longer does it take than the chain's?
# 3. Time `SmallCNN` in channels-last with `time_by_layer_type` at 64 px instead of 32 px. Does
#    max-pooling still dominate the NCHW pass, and does the layout still give most of the gain?
# 4. Take a loader state after 3 batches with `num_workers=2` and load it into a loader with
#    `num_workers=0`. Does it continue correctly?
# 5. The graded exercises: [`exercises/ex06_fsdp_checkpoints.ipynb`](exercises/ex06_fsdp_checkpoints.ipynb).

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. What does `torch.compile` do on the first call, what does a CPU need for it, and why was the first call cold so much slower than warm?
# 2. Why was the compiled chain of pointwise operations so much faster than eager mode?
# 3. Compiling the small MLP did not help. Why, and which law gives the bound?
# 4. `SmallCNN` ran several times faster compiled. How did the chapter split that gain between the memory layout and the compiler, and which layer's share told the story?
# 5. What is a graph break, what causes the one in `step_with_branch`, and which two ways of seeing it did the chapter show?
# 6. Why does a faster training step raise the data-wait fraction, and what did the chapter measure?
# 7. What does a `StatefulDataLoader`'s `state_dict()` hold, and what does it not hold?
# 8. How does the hand-made alternative resume in the middle of an epoch, and when does `common.fsdp.train` fall back to it?
# 9. Where does a loader's state go in a checkpoint, and how is it stored with several ranks?
# 10. How do you combine `torch.compile` with DDP, and with FSDP2?
