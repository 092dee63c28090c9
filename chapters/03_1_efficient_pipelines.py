# %% [markdown]
# # Chapter 3.1 — Efficient pipelines: measure where the time goes, then make the loader fast
# **Guide sections:** §2 构建高效的数据管道 · §2.1 数据管道的概念与重要性 (§2.1.2 数据管道在深度学习中的作用) · §2.2 PyTorch中的数据加载与预处理 (§2.2.1 Dataset与DataLoader类, §2.2.2 数据增强与归一化).
# The guide states the goal (data flows to the model without waiting); everything measured and
# built in this notebook goes beyond the guide.
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - How long each stage of the guide's pipeline takes, with a hand-made stage timer and with `torch.profiler`
# - What `num_workers`, `persistent_workers` and `prefetch_factor` do, measured on your machine: workers
#   against a decode-bound and a storage-bound loader, prefetching against a store that stalls
# - Four changes that keep the *same* normalized batch, each written here in a few lines and measured:
#   uint8 until the batch exists with normalization last, JPEG draft mode, a batched `__getitems__`
#   (and what the `Dataset` contract asks of it), a decode-once uint8 memmap cache
# - The `common.fast` versions of the same code, and the benchmark that compares them with a measured limit
# - When the cache pays for itself, counting the time to build it
# - Why an index kept as a Python list makes every worker grow (copy-on-read), and how to read a loop's data-wait fraction
#
# > **Prerequisites:** chapters 2.1 and 2.2 · **Time:** about 40 min to read, 4 min to run on a 2-core laptop · **Main path:** every section except the two titled "Going further" (worker memory, and the GPU), which are optional.

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/03_1_efficient_pipelines.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/03_1_efficient_pipelines.ipynb)
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
# Imports (standard library, third party, then `common`), the seed and the device. Everything a
# DataLoader worker runs lives in `common`, so workers can import it under any start method;
# the inline versions below run in this process only.
#
# One more setting, visibly: one intra-op thread for PyTorch in this process. DataLoader
# gives each worker one thread too; with more, PyTorch's thread pool competes with the
# workers for the same few cores, which makes every measurement below slower and noisier.

# %%
import functools
import json
import os
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from PIL import Image
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.data import DataLoader, Dataset, StackDataset, Subset, TensorDataset
from torchvision.transforms import v2
from tqdm.auto import tqdm

from common import (
    ClassicEvalPreset,
    CustomImageDataset,
    SlowStorage,
    SmallCNN,
    V2EvalPreset,
    describe_device,
    ensure_data,
    get_device,
    seed_everything,
)
from common.fast.benchmark import BenchConfig, run_benchmark, verdict
from common.fast.benchmark import plot as plot_benchmark
from common.fast.cache import CacheConfig, CachedImageDataset, ensure_cache
from common.fast.costs import epochs_curve, formulations
from common.fast.memory import (
    ArrayIndexDataset,
    ListIndexDataset,
    make_index,
    worker_memory_over_epoch,
)
from common.fast.pipeline import (
    BatchNormalize,
    BatchRandomFlip,
    CacheLoader,
    DraftPilDecoder,
    Uint8EvalDataset,
    decode_tensor,
    make_fast_loader,
)
from common.fast.profiling import DataWaitMeter, native_stderr_silenced, time_stages
from common.fast.timing import time_epochs
from common.readings import read_figure

generator = seed_everything(0)
device = get_device()
torch.set_num_threads(1)
cores = os.cpu_count()
build = Path("../build/ch03")
# Notebook bars; `make notebooks` stores each in its finished state.
progress = functools.partial(tqdm, mininterval=30)
print(describe_device(device), "| CPU cores:", cores)

# %% tags=["parameters"]
# Sizes of this chapter's runs. `make test` runs the notebook with smaller ones (tests/notebook_parameters.py).
EPOCH_REPEATS = 3  # timed epochs per loader (after a warm-up epoch) in the workers and prefetch comparisons
KNOB_IMAGES = 96  # images per epoch in the num_workers x persistent_workers comparison
BENCH_IMAGES = 96  # images of the small benchmark run (`make bench` runs the full one)
BENCH_REPEATS = 2  # runs of each pipeline in that benchmark

# %% [markdown]
# ## §2.2 PyTorch中的数据加载与预处理 — the guide's pipeline on our data
# The guide's eval pipeline: `CustomImageDataset` (§2.2.1 Dataset与DataLoader类) decodes a JPEG with
# PIL, then `Resize(256)`, `CenterCrop(224)`, `ToTensor` and `Normalize` with the ImageNet
# statistics (§2.2.2 数据增强与归一化) run on each sample. `ClassicEvalPreset` is exactly that
# `Compose`; `V2EvalPreset` is the same with the current API, `transforms.v2`, where `ToImage`
# makes a uint8 tensor and `ToDtype(torch.float32, scale=True)` replaces `ToTensor`'s `/ 255`.
# To keep this notebook quick we use the first 192 of the 960 training images.

# %%
data = ensure_data(verbose=False)
csv, images_dir = data.labels_csv("train"), data.images_dir("train")
guide = CustomImageDataset(csv, images_dir, ClassicEvalPreset())
subset = list(range(192))
image, label = guide[0]
assert image.shape == (3, 224, 224) and image.dtype == torch.float32
print("classic:", guide.transform, "\nv2:     ", V2EvalPreset(), "\n", len(subset), "images")

# %% [markdown]
# Both presets give the same tensor to within the difference of their resize implementations:

# %%
v2_image = V2EvalPreset()(Image.open(guide.path(0)).convert("RGB"))
preset_gap = (v2_image - image).abs().max().item()
assert preset_gap < 0.1
print(f"max |classic - v2| = {preset_gap:.4f} (normalized units)")

# %% [markdown]
# ## §2.1 数据管道的概念与重要性 — where the time goes
# §2.1.2 asks that data flow to the model without waiting. First find out what a sample costs.
# `time_stages` runs the guide's pipeline one stage at a time over 96 images and reports
# milliseconds per image.

# %%
stages = time_stages([guide.path(i) for i in subset[:96]], batch_size=32, device=device)
assert list(stages["stage"])[:2] == ["read", "decode"]
read_figure("03_1/guide-ms-per-image", stages["ms_per_image"].sum(), unit=" ms",
            what="one image through every stage of the guide's eval pipeline (224 px)")
stages.round(3)

# %% [markdown]
# As a chart, with the shares this machine measured printed below it.

# %%
figure, axis = plt.subplots(figsize=(7, 2.8))
axis.barh(stages["stage"], stages["ms_per_image"], color="tab:gray")
axis.invert_yaxis()
axis.set_xlabel("ms per image (guide's eval pipeline, one process)")
plt.show()
share = stages.set_index("stage")["share"]
print(f"decode + resize: {share['decode'] + share['resize']:.0%}, "
      f"to_tensor + normalize: {share['to_tensor'] + share['normalize']:.0%}")

# %% [markdown]
# ### The same question asked of `torch.profiler`
# The stage timer runs the stages one by one. The profiler watches a real training step with
# a data-bound loader (the guide's pipeline at a 64 px training size, `num_workers=0`):
# `record_function` marks the wait for the next batch and the model step, and the profiler
# adds every PyTorch op underneath. (`native_stderr_silenced` hides the trace lines the
# profiler's C++ library prints on its own; see its docstring.)

# %%
guide_64 = CustomImageDataset(csv, images_dir, ClassicEvalPreset(resize_size=72, crop_size=64))
profile_loader = DataLoader(Subset(guide_64, subset[:48]), batch_size=16)
model = SmallCNN()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
with native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as prof:
    batches = iter(profile_loader)
    for _ in range(3):
        with record_function("data: next(loader)"):
            images, labels = next(batches)
        with record_function("step: forward+backward+update"):
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(images), labels).backward()
            optimizer.step()
averages = pd.DataFrame([{"name": e.key, "calls": e.count, "cpu_ms": e.cpu_time_total / 1e3}
                         for e in prof.key_averages()])
top = averages.sort_values("cpu_ms", ascending=False).head(8).reset_index(drop=True)
top.round(1)

# %% [markdown]
# The picture: each step's wait for data (grey) against its compute (blue), from the
# profiler's own events. The share printed below is the data-wait fraction of these steps, and
# which case this machine is in (the model runs on the CPU here, so both sides scale with it).

# %%
spans = [(e.name, e.time_range.start / 1e3, e.time_range.elapsed_us() / 1e3)
         for e in prof.events() if e.name.startswith(("data:", "step:"))]
origin = min(start for _, start, _ in spans)
figure, axis = plt.subplots(figsize=(7, 1.6))
for name, start, length in spans:
    axis.broken_barh([(start - origin, length)], (0, 1),
                     color="tab:gray" if name.startswith("data") else "tab:blue")
axis.set_yticks([])
axis.set_xlabel("ms (grey: waiting for the batch, blue: training step)")
plt.show()
waiting = sum(length for name, _, length in spans if name.startswith("data"))
profiled_wait = waiting / sum(length for _, _, length in spans)
assert len(spans) == 6  # 3 waits for data, 3 training steps
read_figure("03_1/profiled-data-wait", 100 * profiled_wait, unit="%",
            what="data-wait fraction of the 3 profiled steps (guide's pipeline at 64 px, num_workers=0)")
print("data-bound here" if profiled_wait > 0.3 else "mostly compute here (a fast CPU decodes quickly)")

# %% [markdown]
# ## §2.2.1 Dataset与DataLoader类 — the knobs of `DataLoader`
# The guide says `DataLoader` "支持多线程加载" (loads with several threads), and then that
# `num_workers` is the number of *processes* (进程数). The second is right: each worker is a separate
# process with its own copy of the dataset object. That is why workers can use several cores
# despite Python's GIL, and also why they cost something.
#
# `time_epochs(loader, n, min_seconds=0)` runs one epoch and returns images/s. First
# `num_workers` from 0 up to the core count (at most 4 here), with and without
# `persistent_workers`, two epochs of 96 images each. Epoch 1 pays for starting the workers.

# %%
knob_subset = Subset(guide, subset[:KNOB_IMAGES])
rows = []
for workers in progress(range(min(cores, 4) + 1), desc="num_workers"):
    for persistent in ([False] if workers == 0 else [False, True]):
        loader = DataLoader(knob_subset, batch_size=32, num_workers=workers,
                            persistent_workers=persistent)
        speeds = [time_epochs(loader, len(knob_subset), min_seconds=0) for _ in range(2)]
        rows.append({"num_workers": workers, "persistent_workers": persistent,
                     "epoch_1": speeds[0], "epoch_2": speeds[1]})
knobs = pd.DataFrame(rows)
knobs.round(0)

# %% [markdown]
# What a worker's batch costs on the way back: the worker's `collate` stacks the samples into a
# tensor whose storage is a **shared-memory segment**; only a small handle (the segment's name
# and the tensor's shape) is pickled and crosses the queue, and the main process maps the same
# pages. Nothing is pickled *into* shared memory; the cost is the copy into the segment (the
# size of one float32 batch is printed below), creating and mapping segments, and the main
# process waiting when the workers cannot keep up. Without `persistent_workers` every epoch
# starts the workers again. The cell below says, from the table above, what start-up cost and
# whether workers helped on this machine. Note the size of this experiment: an epoch of 96 images
# is 3 batches of 32, each a 19 MB float32 tensor, so a worker spends much of its time writing
# batches into shared memory and there are only 3 batches to spread over the workers.

# %%
axis = knobs.set_index(["num_workers", "persistent_workers"])[["epoch_1", "epoch_2"]].plot.bar(
    figsize=(7, 2.8), rot=0, ylabel="images/s", xlabel="(num_workers, persistent_workers)")
plt.show()
in_process = knobs.loc[knobs["num_workers"] == 0, "epoch_2"].iloc[0]
best_workers = knobs.loc[knobs["epoch_2"].idxmax()]
kept = knobs[knobs["persistent_workers"]]
batch_mb = 32 * 3 * 224 * 224 * 4 / 1e6
read_figure("03_1/persistent-epoch-2-vs-1", (kept["epoch_2"] / kept["epoch_1"]).median(), unit="×",
            what="persistent workers, epoch 2 against epoch 1 (which starts them)")
gain = best_workers["epoch_2"] / in_process
read_figure("03_1/best-workers-224px", gain, unit="×",
            what=f"the fastest loader (num_workers={best_workers['num_workers']}) against num_workers=0, "
                 f"epoch 2, batches of 32 at 224 px")
print("workers helped" if round(gain, 2) >= 1.1 else "workers did not pay",
      f"on {cores} cores with these batches: each is a {batch_mb:.0f} MB float32 tensor that a worker writes "
      f"into shared memory, and an epoch has only {len(knob_subset) // 32} of them; the next cell times the "
      f"same decoding with batches of 4 images at 64 px ({4 * 3 * 64 * 64 * 4 / 1e6:.2f} MB each)")

# %% [markdown]
# The table above is *decode-bound*: every sample is a JPEG decoded and resized on a CPU core, and
# here the main process and the workers share the few cores. We now keep the decoding and make the
# batches small: the 64 px pipeline, 4 images (0.2 MB) per batch, 24 batches per epoch. On a cluster the files often come from
# network storage (NFS, an object store), where each read first *waits* for the server and the CPU
# idles. `common.SlowStorage` (Chapter 2.1) puts a stated wait before every read: 20 ms here, in an
# object store's range. Both cases side by side on the 64 px pipeline, 0, 2 and 4 workers,
# persistent, each the median of `EPOCH_REPEATS` (3) epochs after a warm-up epoch. (PyTorch warns when the workers
# outnumber the cores; for workers that mostly wait that is the point, so the cell silences just that
# warning.)

# %%
workloads = {"decode-bound": Subset(guide_64, subset[:96]),
             "storage-bound": SlowStorage(Subset(guide_64, subset[:32]), latency_s=0.020)}
rows = []
for workload, dataset in progress(workloads.items(), desc="workloads"):
    for workers in (0, 2, 4):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            loader = DataLoader(dataset, batch_size=4, num_workers=workers,
                                persistent_workers=workers > 0)
            speeds = [time_epochs(loader, len(dataset), min_seconds=0) for _ in range(1 + EPOCH_REPEATS)]
        rows.append({"workload": workload, "num_workers": workers,
                     "images_per_s": float(np.median(speeds[1:]))})
bound = pd.DataFrame(rows).pivot(index="workload", columns="num_workers", values="images_per_s")
bound_up = bound.div(bound[0], axis=0)
bound_up.round(2)

# %% [markdown]
# As a chart, and the ratios printed. Why they differ: a waiting worker needs no core, so N workers
# keep N reads in flight on any machine and the speed-up tends to N (until the decoding left over
# fills the cores); a decoding worker needs a core of its own, besides the main process's, so on
# `cores` cores the speed-up cannot pass `cores` and the main process takes part of one. With cores
# to spare (a training node has 8–64), decode-bound loaders scale with workers too.

# %%
axis = bound_up.T.plot.bar(figsize=(6, 2.6), rot=0, ylabel="x num_workers=0")
plt.show()
for workload, short in (("storage-bound", "storage"), ("decode-bound", "decode")):
    for workers in (2, 4):
        read_figure(f"03_1/{short}-workers-{workers}", bound_up.loc[workload, workers], unit="×",
                    what=f"{workers} workers against num_workers=0, {workload} (64 px, batches of 4)",
                    expect=(">=", 1.5) if (workload, workers) == ("storage-bound", 4) else None)
print("decoding has no spare core for 4 workers" if cores < 5 else "enough cores for 4 workers")

# %% [markdown]
# How the loader keeps its workers ahead of the training loop, as a schematic timeline (not a measurement): it hands out `prefetch_factor × num_workers` batches at the start, then one more for each batch the loop takes.
#
# ![Workers prefetching batches](figures/loader_prefetch.svg)
#
# *The loop waits only for the first batch; after that the two workers stay up to four batches ahead, and pause when the queue is full.*

# %% [markdown]
# `prefetch_factor` is how many batches each worker prepares ahead: at most
# `num_workers × prefetch_factor` batches are in flight. It cannot make the average batch faster;
# it lets the loader absorb an *uneven* one. A store that now and then stalls (a busy server) shows
# it: `SlowStorage(..., latency_s=0.002, stall_s=0.05, stall_every=20)` makes every read wait 2 ms
# and one read in 20 wait 50 ms more. The consumer stands in for a training step on an
# accelerator: the main process waits 15 ms per batch (`time.sleep`) while the device computes.
# Two workers, 4 images per batch, data already decoded in memory so that only the storage
# differs, and steady storage (no stalls) as the control. `DataWaitMeter` gives the share of the
# loop spent waiting for data.

# %%
step_s, batch_size = 0.015, 4
frames = TensorDataset(torch.stack([guide_64[i][0] for i in subset[:64]]),
                       torch.tensor(guide_64.labels[:64]))
epoch = Subset(frames, [i % 64 for i in range(96)])  # 24 batches
stores = {"steady": SlowStorage(epoch, latency_s=0.002),
          "stalls": SlowStorage(epoch, latency_s=0.002, stall_s=0.05, stall_every=20)}


def consume(loader):
    meter = DataWaitMeter()
    start = time.perf_counter()
    for _ in meter.wrap(loader):
        time.sleep(step_s)  # the training step, on the device
    return len(epoch) / (time.perf_counter() - start), meter.fraction


rows = []
for store, dataset in progress(stores.items(), desc="storage"):
    for prefetch in (1, 4):
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=2,
                            prefetch_factor=prefetch, persistent_workers=True)
        runs = [consume(loader) for _ in range(1 + EPOCH_REPEATS)][1:]  # the first starts the workers
        rows.append({"storage": store, "prefetch_factor": prefetch,
                     "images_per_s": np.median([r[0] for r in runs]),
                     "data_wait": np.median([r[1] for r in runs])})
prefetching = pd.DataFrame(rows).set_index(["storage", "prefetch_factor"])
prefetching.round(2)

# %% [markdown]
# Why, from the numbers: a batch is requested when `num_workers × prefetch_factor` batches are
# ahead of it, so the loop has that many steps to run before it needs it. If a stalled batch takes
# longer than that slack, the loop waits; otherwise the stall is hidden. The cell prints the slack
# against the stalled batch's read time, the measured difference for each store, and whether
# this machine's workers deliver the stated latency at all (the steady control says; on a
# machine whose cores are busy with other work they run late, and the comparison is noise).

# %%
stalled_ms = 1e3 * (stores["stalls"].stall_s + batch_size * stores["stalls"].latency_s)
for prefetch in (1, 4):
    slack = 2 * prefetch * step_s * 1e3
    print(f"prefetch_factor={prefetch}: {2 * prefetch} batches ahead = {slack:.0f} ms of steps "
          f"vs a {stalled_ms:.0f} ms stalled batch -> "
          f"{'hidden' if slack > stalled_ms else 'the loop waits'}")
by_store = prefetching["images_per_s"].unstack("prefetch_factor")
gain = by_store[4] / by_store[1]
for store in ("stalls", "steady"):
    read_figure(f"03_1/prefetch-{store}", gain[store], unit="×",
                what=f"prefetch_factor=4 against 1, {store} storage (data wait "
                     f"{prefetching.loc[(store, 1), 'data_wait']:.0%} -> {prefetching.loc[(store, 4), 'data_wait']:.0%})",
                expect=(">=", 1.1) if store == "stalls" else None)
control = prefetching.loc[("steady", 1), "data_wait"]
if control < 0.2:  # the workers deliver the stated latency: steady storage barely waits
    print(f"steady storage waits {control:.0%}: the workers keep up, so only the stalls differ")
else:
    print(f"this machine is too busy: even steady storage waits {control:.0%} of the loop (the "
          "workers run late), so the stalls are not what limits it; rerun on a quieter machine")

# %% [markdown]
# ## §2.2.2 数据增强与归一化 — the same batch, built faster, step by step
# Four changes, each written here in a few lines and measured on the same 96 images. The first:
# **keep every sample uint8 until the batch exists, and normalize last, once per batch.**
# A uint8 crop is a quarter of a float crop's bytes (less to copy between processes and to a
# GPU), and the float maths runs once per batch. The dataset decodes with `torchvision.io`
# (`decode_tensor` wraps it; torchvision 0.29 warns on every call that its decoders move to
# TorchCodec, which this course does not install, and the wrapper silences just that warning)
# and resizes and crops with `transforms.v2` on the uint8 tensor:

# %%
class InlineUint8(Dataset):
    def __init__(self, paths, labels):
        self.paths, self.labels = paths, labels
        self.geometry = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, idx):
        data = torch.frombuffer(bytearray(Path(self.paths[idx]).read_bytes()), dtype=torch.uint8)
        return self.geometry(decode_tensor(data, jpeg=True)), int(self.labels[idx])


paths, labels = [str(guide.path(i)) for i in subset[:96]], np.array(guide.labels[:96])
uint8_set = InlineUint8(paths, labels)
crop, _ = uint8_set[0]
print(crop.dtype, tuple(crop.shape))

# %% [markdown]
# Normalizing last: `(x / 255 - mean) / std` is `x * scale + shift` with two per-channel
# constants. Done image by image into one reused float batch, each image's floats stay in the
# CPU cache between the three passes (convert, multiply, add), and nothing is allocated per
# batch. It equals `ToDtype(scale=True)` + `Normalize`:

# %%
mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
scale, shift = (1 / (255 * std)).view(3, 1, 1), (-mean / std).view(3, 1, 1)
out = torch.empty(32, 3, 224, 224)


def normalize_last(batch):
    for image, target in zip(batch, out[:len(batch)], strict=True):
        target.copy_(image).mul_(scale).add_(shift)
    return out[:len(batch)]


reference = v2.Normalize(mean.tolist(), std.tolist())(v2.ToDtype(torch.float32, scale=True)(crop))
assert torch.allclose(normalize_last(crop[None])[0], reference, atol=1e-5)

# %% [markdown]
# Measured against the guide's loader on the same files (in-process, one epoch of 96 images):

# %%
def speed(batches, n=96):
    start = time.perf_counter()
    for images, _ in batches:
        assert images.dtype == torch.float32
    return n / (time.perf_counter() - start)


steps = {"guide (PIL, float per sample)": speed(DataLoader(knob_subset, batch_size=32)),
         "uint8 + normalize last": speed((normalize_last(x), y) for x, y in
                                         DataLoader(uint8_set, batch_size=32))}
pd.Series(steps, name="images/s").round(0)

# %% [markdown]
# **JPEG draft mode.** A JPEG stores 8×8 blocks of frequencies, so the decoder can produce a
# 1/2, 1/4 or 1/8 scale image almost for free; PIL does it when told the target size
# (`image.draft`). It only applies when the image is at least twice the target. Our images are
# less than twice 256 px wide (their range is printed), so for `Resize(256)` it never
# applies — the cell counts it. (So in the benchmark below, `pil_draft_uint8` gains only from
# uint8 + normalize last, not from draft mode.)

# %%
def draft_scale(path, target):
    with Image.open(path) as image:
        width = image.size[0]
        image.draft("RGB", target)
        return width / image.size[0]


applies = sum(draft_scale(guide.path(i), (256, 256)) > 1 for i in range(len(guide)))
assert applies == 0
widths = [Image.open(guide.path(i)).size[0] for i in range(len(guide))]
print(f"images {min(widths)}-{max(widths)} px wide; draft mode applies to {applies} of {len(guide)}"
      " at Resize(256)")

# %% [markdown]
# At a training resolution of 64 px it does apply (the images are several times larger; the
# cell prints by how much), and what it pays is printed too:

# %%
small = {"full decode": DraftPilDecoder(resize_size=72, crop_size=64, draft=False),
         "draft mode": DraftPilDecoder(resize_size=72, crop_size=64, draft=True)}
draft_speed = {}
for name, decode in small.items():
    start = time.perf_counter()
    crops = [decode(path) for path in paths]
    draft_speed[name] = len(paths) / (time.perf_counter() - start)
scales = [draft_scale(p, (72, 72)) for p in paths]
print(f"draft scale at 64 px: {min(scales):.0f}x to {max(scales):.0f}x smaller decodes")
read_figure("03_1/draft-vs-full", draft_speed["draft mode"] / draft_speed["full decode"], unit="×",
            what="draft mode against a full decode, decode + resize to 64 px")
pd.Series(draft_speed, name="images/s (decode + resize to 64 px)").round(0)

# %% [markdown]
# Same crops? Not bit-identical: the DCT-domain downscale differs from an antialiased
# resize, mostly at sharp edges; on average by the few uint8 levels printed below — fine
# for training; for evaluation against published numbers, decode fully.

# %%
full = torch.stack([small["full decode"](p) for p in paths]).float()
drafted = torch.stack([small["draft mode"](p) for p in paths]).float()
mean_levels = (full - drafted).abs().mean().item()
assert mean_levels < 2.0
print(f"mean |difference|: {mean_levels:.2f} uint8 levels")

# %% [markdown]
# **A batched `__getitems__`.** When a dataset defines `__getitems__(indices)`, the DataLoader
# calls it once per batch instead of `__getitem__` once per sample. The `Dataset` contract says
# it returns a **list of samples**, which the `collate_fn` (the default one here) stacks. Kept to
# that contract, it composes with PyTorch's dataset wrappers:

# %%
class InlineBatched(InlineUint8):
    def __getitems__(self, indices):
        return [self[i] for i in indices]  # one call per batch; a list of samples


batched = InlineBatched(paths, labels)
pairs = StackDataset(batched, batched).__getitems__([0, 1, 2])
assert len(pairs) == 3 and torch.equal(pairs[0][0][0], batched[0][0])
images, _ = next(iter(DataLoader(batched, batch_size=32)))
print("default collate:", tuple(images.shape))

# %% [markdown]
# `common.fast`'s datasets (`Uint8EvalDataset`, `CachedImageDataset`) go one step further and
# return the batch *already stacked* (`collate_fn=keep_batch`), which saves the collate copy but
# breaks the contract: `StackDataset` checks that it got one sample per index and refuses, and
# `ConcatDataset` has no `__getitems__`, so the DataLoader falls back to per-sample calls and
# `keep_batch` hands on a plain list. Use them directly or through `Subset` (which forwards
# `__getitems__`), not inside those wrappers:

# %%
stacked = Uint8EvalDataset(csv, images_dir, decoder="torchvision")
try:
    StackDataset(stacked, stacked).__getitems__([0, 1, 2])
    refused = None
except ValueError as error:
    refused = str(error)
assert refused is not None and "mismatch" in refused
print("StackDataset:", refused)

# %% [markdown]
# **Decode once: a uint8 memmap cache.** Every epoch decodes and resizes the same images again.
# Do it once, into one file of `N × 3 × 224 × 224` bytes that `np.memmap` maps into memory;
# afterwards an epoch only reads crops (from the page cache, after the first).

# %%
inline_root = build / "inline_cache"
inline_root.mkdir(parents=True, exist_ok=True)
start = time.perf_counter()
array = np.lib.format.open_memmap(inline_root / "images.npy", mode="w+", dtype=np.uint8,
                                  shape=(len(uint8_set), 3, 224, 224))
for index in range(len(uint8_set)):
    array[index] = uint8_set[index][0].numpy()
array.flush()
inline_build = time.perf_counter() - start
cached_array = torch.from_numpy(np.load(inline_root / "images.npy", mmap_mode="c"))
read_figure("03_1/inline-cache-build", inline_build / len(uint8_set) * 1e3, unit=" ms",
            what=f"building the inline cache, per image ({inline_build:.2f} s for {len(uint8_set)} images)")
assert torch.equal(cached_array[5], uint8_set[5][0])

# %% [markdown]
# An epoch from the cache: gather each batch's rows and normalize them straight into the
# reused float batch (no uint8 copy in between). All four steps, side by side:

# %%
def cache_batches(batch_size=32):
    for start_row in range(0, len(cached_array), batch_size):
        rows = cached_array[start_row:start_row + batch_size]
        yield normalize_last(rows), torch.as_tensor(labels[start_row:start_row + batch_size])


steps["uint8 + batched __getitems__"] = speed((normalize_last(x), y) for x, y in
                                              DataLoader(batched, batch_size=32))
steps["memmap cache"] = speed(cache_batches())
steps = pd.Series(steps, name="images/s")
read_figure("03_1/memmap-vs-guide", steps["memmap cache"] / steps["guide (PIL, float per sample)"], unit="×",
            what="an epoch from the inline memmap cache against the guide's loader", expect=(">=", 3.0))
(steps / steps.iloc[0]).round(2).rename("x guide").to_frame().assign(images_per_s=steps.round(0))

# %% [markdown]
# ## The `common.fast` versions, and the benchmark
# The same ideas, grown up, are what the benchmark and the later chapters use:
# `Uint8EvalDataset` (uint8 decoders: `decoder="torchvision"`, `"pil_draft"`), `BatchNormalize`
# and `NormalizedLoader` (normalize last, into a ring of reused buffers with `buffers=2`),
# `common.fast.cache` (`ensure_cache`, with a manifest that notices changed sources and damaged
# files by `stat`, and re-hashes only on demand), `CachedImageDataset` (batched `__getitems__`)
# and `CacheLoader` (the in-process loop above: rows normalized straight into reused buffers).
# First, the correctness check against the guide's tensors for 32 images: 1e-5 for the PIL and
# cache paths (same resampling) and two uint8 levels (2/255/std ≈ 0.035) for torchvision.

# %%
reference = torch.stack([guide[i][0] for i in range(32)])
cache = ensure_cache(guide, build / "cache_224", indices=subset)
normalize = BatchNormalize()
candidates = {
    "pil_draft_uint8": Uint8EvalDataset(csv, images_dir, decoder="pil_draft"),
    "torchvision_uint8": stacked,
    "cache_batched": CachedImageDataset(cache.root),
}
errors = {name: (normalize(dataset.__getitems__(list(range(32)))[0]) - reference).abs().max().item()
          for name, dataset in candidates.items()}
fused, _ = next(iter(CacheLoader(CachedImageDataset(cache.root), batch_size=32)))
errors["cache_fused"] = (fused - reference).abs().max().item()
assert errors["pil_draft_uint8"] < 1e-5 and errors["cache_batched"] < 1e-5
assert errors["cache_fused"] < 1e-5 and errors["torchvision_uint8"] <= 2 / 255 / 0.224
pd.Series(errors, name="max |difference|")

# %% [markdown]
# **The limit.** What is the fastest way to make the normalized batch when the decoded uint8
# crops are already in memory? `formulations` times the candidates side by side (round-robin,
# one thread; each is checked against the reference first, outside the timed loop, since the
# check costs more than the work). The benchmark's `memory_limit` uses the per-image one
# (`normalize_into`); the cell prints where it ranks on this machine, and compares the fastest
# with the inline memmap cache above, which does the same work from a memmap:

# %%
ways = formulations(torch.from_numpy(cache.images[:96].copy()), repeats=3)
assert len(ways) == 5 and (ways["images_per_s"] > 0).all()
rank = ways.index[ways["formulation"].str.startswith("per image")][0] + 1
read_figure("03_1/limit-vs-memmap", ways["images_per_s"][0] / steps["memmap cache"], unit="×",
            what=f"the fastest formulation ({ways['formulation'][0]}) against the inline memmap cache")
print(f"the per-image one ranks {rank} of {len(ways)}")
ways.round(0)

# %% [markdown]
# Now `common.fast.benchmark` in one run on the same files: (a) the guide's pipeline, (b) each
# formulation at several `num_workers`, and (c) the limit. Configurations are timed in turn,
# medians of repeats, with the peak PSS (main process plus that pipeline's workers). Here it is
# small (96 images, 0 and 2 workers); `make bench` runs the full version.

# %%
config = BenchConfig(out=build / "bench", num_images=BENCH_IMAGES, repeats=BENCH_REPEATS, min_seconds=0.1,
                     num_workers=(0, min(2, cores)), progress=False)
table = run_benchmark(config)
result = verdict(table)
read_figure("03_1/cache-vs-guide", result["speedup_vs_guide"], unit="×",
            what=f"the best pipeline ({result['best']}) against the guide's", expect=(">=", 3.0))
pd.Series(result, name="verdict").to_frame()

# %% [markdown]
# The table, and as a chart (log scale):

# %%
table.round(2)

# %%
plot_benchmark(table)

# %% [markdown]
# ### When does the cache pay for itself?
# The cache is not free: it is built once (decoding every image), and opened every run
# (a few `stat` calls). Counting both, the average images/s over the first `e` epochs is
# `e·N / (build + open + e·N / cached speed)`; the best pipeline that decodes every epoch is a
# flat line. Where they cross is the break-even epoch (printed; here at 96 images, where the
# build is a larger share than at full size):

# %%
payoff = json.loads((config.out / "benchmark.json").read_text())["cache"]  # cache_payoff's
curve = epochs_curve(table, payoff, epochs=[0.5, 1, 2, 3, 5, 10, 20])
axis = curve.plot(figsize=(7, 3), marker="o", logx=True, ylabel="images/s, averaged over e epochs")
axis.set_xlabel("epochs e (cache build and open included)")
plt.show()
read_figure("03_1/cache-build", payoff["build_s"], unit=" s", what=f"building the cache of {payoff['num_images']} images")
print(f"pays off after {payoff['break_even_epochs']:.1f} epochs against {payoff['best_decoding']}")

# %% [markdown]
# ### When workers help, and when they cost more than they save
# Workers help when a sample is *expensive to produce* (decode + resize, milliseconds per
# image) *and* there are spare cores to spread the work over, or when reads wait on storage
# (measured above). They hurt when a sample is *cheap* (a crop read from the cache,
# microseconds): the batch must still be copied into a shared-memory segment and handed
# across — more work than producing it. The cell prints what this table shows.

# %%
by = table.set_index(["pipeline", "num_workers"])["images_per_s"]
for name in ("torchvision_uint8", "cache_batched"):
    ratio = by[name, min(2, cores)] / by[name, 0]
    read_figure(f"03_1/workers-{name}", ratio, unit="×",
                what=f"{name} with {min(2, cores)} workers against in-process")
    print("  ->", "workers help" if ratio > 1.1 else "workers cost more than they save")

# %% [markdown]
# ## Going further: worker memory, a list index copies itself into every worker
# A forked worker shares the parent's pages until it writes to them, and reading a Python
# object writes its reference count. `ListIndexDataset` keeps 200,000 `(path, label)` tuples
# in a list (like `ImageFolder.samples`); `ArrayIndexDataset` keeps the same index in two
# NumPy arrays (as `CustomImageDataset` does). Each batch reports its worker's USS (memory
# only that process holds) as the epoch proceeds.

# %%
names, index_labels = make_index(200_000)
memory = pd.concat([worker_memory_over_epoch(cls(names, index_labels), num_workers=2,
                                             batch_size=10_000).assign(index=cls.__name__)
                    for cls in (ListIndexDataset, ArrayIndexDataset)])
growth = memory.groupby(["index", "worker"])["uss_mb"].agg(lambda s: s.iloc[-1] - s.iloc[0])
assert growth["ListIndexDataset"].mean() > 3 * max(growth["ArrayIndexDataset"].mean(), 0.5)
growth.round(1)

# %% [markdown]
# Over the epoch, each list-index worker grows by the share of the index it has read; the
# NumPy-index workers stay flat. What that means at scale (8 workers, a 10-million-sample
# index read in full by each over its epochs) is printed from the measured growth.

# %%
figure, axis = plt.subplots(figsize=(7, 3))
for (index, worker), rows in memory.groupby(["index", "worker"]):
    axis.plot(rows["seen"], rows["uss_mb"], label=f"{index} worker {worker}")
axis.set_xlabel("fraction of the epoch")
axis.set_ylabel("worker USS (MiB)")
axis.legend(fontsize=8)
plt.show()
per_entry = growth["ListIndexDataset"].mean() * 2**20 / (len(names) / 2)  # each worker read half
print(f"{per_entry:.0f} bytes copied per index entry read; 8 workers x 10 M entries: "
      f"{8 * 10e6 * per_entry / 1e9:.0f} GB")

# %% [markdown]
# ## §2.1.2 数据管道在深度学习中的作用 — a training loop that reports its data wait
# `DataWaitMeter.wrap(loader)` times each `next()` on the loader. The *data-wait fraction*
# is the time blocked on the next batch divided by the iteration time (the first batch,
# which includes worker start-up, is set aside). We train `SmallCNN` on 64 px crops for
# one epoch of 192 images with two loaders that produce the same batches.

# %%
def train_metered(model, loader, optimizer, device):
    meter, loss_fn = DataWaitMeter(), nn.CrossEntropyLoss()
    model.train()
    for images, labels in meter.wrap(loader):
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()
    return meter.summary()

# %% [markdown]
# The slow loader is the guide's, at 64 px, in the main process. The tuned loader reads
# crops from a 64 px cache (built once) with `CacheLoader`, normalized into reused buffers.

# %%
slow = DataLoader(Subset(guide_64, subset), batch_size=16, shuffle=True, generator=generator)
cache_64 = ensure_cache(guide, build / "cache_64", CacheConfig(resize_size=72, crop_size=64),
                        indices=subset)
tuned = CacheLoader(CachedImageDataset(cache_64.root), batch_size=16, shuffle=True,
                    generator=generator)
print(len(slow), "and", len(tuned), "batches per epoch")

# %% [markdown]
# One epoch with each (a fresh model and optimizer per loader, so the step costs the same):

# %%
waits = {}
for name, loader in progress({"slow (guide)": slow, "tuned (cache)": tuned}.items(),
                             desc="loaders"):
    model = SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    waits[name] = train_metered(model, loader, optimizer, device)
waits = pd.DataFrame(waits).T
read_figure("03_1/data-wait-guide", 100 * waits.loc["slow (guide)", "fraction"], unit="%",
            what="data-wait fraction of an epoch with the guide's loader (64 px, in-process)")
read_figure("03_1/data-wait-cache", 100 * waits.loc["tuned (cache)", "fraction"], unit="%",
            what="data-wait fraction of an epoch with the 64 px cache and CacheLoader")
waits.round(3)

# %% [markdown]
# The printed shares are the point: the tuned loop spends its time in the model, the slow one
# waits for data. (Augmenting randomly from the cache: `BatchRandomFlip`, or a `transform` on
# `CachedImageDataset` such as `v2.RandomCrop(64, padding=4)` — cheap on uint8.)

# %% [markdown]
# ## Going further: on a GPU, pinned memory, non-blocking copies, normalization on the device
# With CUDA, `pin_memory=True` makes the loader put each batch in page-locked memory, so
# `.to(device, non_blocking=True)` is an asynchronous DMA that overlaps with compute. Copy
# uint8 and normalize on the GPU: four times fewer bytes cross the bus. These cells run
# only when CUDA is present; on a CPU-only machine they say so and do nothing.

# %%
has_cuda = device.type == "cuda"
if not has_cuda:
    print("GPU section skipped: CUDA is not available on this machine.")

# %% [markdown]
# Host-to-device copy of one batch of 64 crops: float32 (the guide's batch) vs uint8, from
# pageable vs pinned memory.

# %%
if has_cuda:
    batch = torch.from_numpy(cache.images[:64].copy())
    copies = {}
    for name, tensor in {"float32 pageable": normalize(batch), "uint8 pageable": batch,
                         "uint8 pinned": batch.pin_memory()}.items():
        tensor.to(device)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20):
            tensor.to(device, non_blocking=True)
        torch.cuda.synchronize()
        copies[name] = (time.perf_counter() - start) / 20 * 1e3
    print(pd.Series(copies, name="ms per batch copy").round(3))
else:
    print("skipped: needs a CUDA GPU (pinned host memory and an asynchronous copy to the device)")

# %% [markdown]
# The tuned loader on the GPU: pinned uint8 batches, flipped and normalized on the device,
# feeding a real model step (SmallCNN at 224 px); its data-wait fraction:

# %%
if has_cuda:
    gpu_loader = make_fast_loader(CachedImageDataset(cache.root), batch_size=32, shuffle=True,
                                  pin_memory=True, generator=generator)
    flip = BatchRandomFlip()

    def gpu_batches(loader):
        for images, labels in loader:  # uint8, pinned -> asynchronous copy
            images = images.to(device, non_blocking=True)
            yield normalize(flip(images)), labels.to(device, non_blocking=True)

    model = SmallCNN(width=32).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    gpu_wait = train_metered(model, gpu_batches(gpu_loader), optimizer, device)
    print(pd.Series(gpu_wait).round(4))
else:
    print("skipped: needs a CUDA GPU (uint8 batches copied to it, then flipped and normalized on it)")

# %% [markdown]
# ## Summary
# - Measure first (a stage timer, `torch.profiler`): in the guide's pipeline decoding and
#   resizing dominate, and the float work per sample (`ToTensor`, `Normalize`) is a sizeable extra.
# - Keep samples uint8 and normalize once per batch, last, into reused buffers (on the GPU when
#   there is one): the same batch, fewer bytes, no allocation per batch.
# - Draft mode pays only when images are at least twice the target size; count before you rely on it.
# - A batched `__getitems__` should return a list of samples; returning a stacked batch is faster
#   but breaks `StackDataset` and `ConcatDataset`.
# - Decode and resize once into a uint8 memmap cache; count its build time — the benchmark prints
#   the epoch after which it pays off and how close the best pipeline comes to the measured limit.
# - Workers pay when reads wait on storage (several times, even on 2 cores) or when there are
#   spare cores to decode on; `prefetch_factor` absorbs uneven batches (a stalling store), not slow ones.
# - Keep the index in NumPy arrays, not lists of Python objects, or every worker slowly
#   copies it (copy-on-read); watch the data-wait fraction of the training loop.
#
# ## Further reading
# - [Performance tuning guide](https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html): `num_workers`, `pin_memory`, non-blocking copies and one-thread settings, the first things to try, as measured here.
# - [`torch.utils.data`](https://pytorch.org/docs/stable/data.html): multi-process loading, `persistent_workers`, `prefetch_factor`, memory pinning, and the copy-on-read warning behind the worker-memory section.
# - [Profiling your PyTorch module](https://pytorch.org/tutorials/beginner/profiler.html) and the [profiler recipe](https://pytorch.org/tutorials/recipes/recipes/profiler_recipe.html): `record_function`, `key_averages` and traces, as used in the profiler section.
# - [torchvision transforms v2](https://pytorch.org/vision/stable/transforms.html): the performance notes (uint8 tensors, v2) behind keeping samples uint8 and normalizing last.
# - [torchvision.io image decoding](https://pytorch.org/vision/stable/io.html): `decode_jpeg` and friends, the decoders `InlineUint8` calls.
#
# ## Exercises
# 1. Run `make bench` (full benchmark) and compare its table with the small one above. Which
#    formulation wins at `num_workers=0`, and which at the core count? After how many epochs
#    does the cache pay off at full size?
# 2. Add `v2.RandomCrop(64, padding=4)` as the `transform` of the 64 px `CachedImageDataset`
#    and measure the data-wait fraction again (with `NormalizedLoader(make_fast_loader(...))`:
#    `CacheLoader` refuses per-sample transforms). Is cheap augmentation still cheap?
# 3. Make the model step heavier (`SmallCNN(width=64)`) and rerun the training loops: how do
#    the two data-wait fractions change, and why does a faster loader matter less?
# 4. Change `ListIndexDataset` to store a list of `str` paths plus a NumPy label array. Does
#    the worker memory still grow? Why (or why not)?

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. The guide says `DataLoader` loads data “with several threads”. What is a worker really, and how does a batch a worker made reach the main process?
# 2. What does `persistent_workers=True` change, and what does the first epoch of a loader pay for?
# 3. When do workers help, and when do they cost more than they save?
# 4. What does `prefetch_factor` do, what can it not do, and what did the experiment with a stalling store show?
# 5. Why keep the samples uint8 until the batch exists, and normalize last, once per batch?
# 6. When does JPEG draft mode speed up decoding, and why did it never apply at `Resize(256)` in this chapter?
# 7. What must a batched `__getitems__` return, and what breaks if it returns an already stacked batch?
# 8. When does the uint8 memmap cache pay for itself, and what must the comparison include?
# 9. Why does a list index make every worker's memory grow, and by how much did the chapter measure it?
# 10. What is the data-wait fraction, and what did it show for the guide's loader and the tuned one?
