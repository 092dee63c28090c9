# %% [markdown]
# # Chapter 3.1 — Efficient pipelines: measure where the time goes, then make the loader fast
# **Guide sections:** beyond the guide (continues §2.1.2 数据管道在深度学习中的作用 · §2.2.1 Dataset与DataLoader类)
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - How long each stage of the guide's pipeline takes (read, decode, resize, crop, to-tensor, normalize, collate, copy), measured
# - What `num_workers`, `persistent_workers`, `prefetch_factor`, batch size and `pin_memory` do, measured on your machine
# - Faster formulations that produce the *same* normalized batch: uint8 until the batch exists, JPEG draft mode, a decode-once uint8 cache, batched `__getitems__`
# - When worker processes help and when moving batches between processes costs more than it saves
# - Why an index kept as a Python list makes every worker grow (copy-on-read), and why a NumPy index does not
# - How to read a training loop's *data-wait fraction*, and how a tuned loader brings it near zero

# %% [markdown]
# Imports (standard library, third party, then `common`), the seed and the device. Everything a
# DataLoader worker runs lives in `common` (`fastdata`, `cache`, `memory`, `profiling`,
# `benchmark`), so workers can import it under any start method.
#
# One more setting, visibly: one intra-op thread for PyTorch in this process. DataLoader
# gives each worker one thread too; with more, PyTorch's thread pool competes with the
# workers for the same few cores (and on a busy machine its threads wait on each other),
# which makes every measurement below slower and noisier. It is itself a knob worth trying.

# %%
import os
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset
from tqdm.auto import tqdm

from common import (
    ClassicEvalPreset,
    CustomImageDataset,
    SmallCNN,
    describe_device,
    ensure_data,
    get_device,
    seed_everything,
)
from common.fast.benchmark import BenchConfig, run_benchmark, time_epochs, verdict
from common.fast.benchmark import plot as plot_benchmark
from common.fast.cache import CacheConfig, CachedImageDataset, ensure_cache
from common.fast.memory import (
    ArrayIndexDataset,
    ListIndexDataset,
    make_index,
    worker_memory_over_epoch,
)
from common.fast.pipeline import (
    BatchNormalize,
    BatchRandomFlip,
    DraftPilDecoder,
    NormalizedLoader,
    Uint8EvalDataset,
    make_fast_loader,
)
from common.fast.profiling import DataWaitMeter, time_stages

generator = seed_everything(0)
device = get_device()
torch.set_num_threads(1)
cores = os.cpu_count()
build = Path("../build/ch03")
print(describe_device(device), "| CPU cores:", cores)

# %% [markdown]
# ## The guide's pipeline on our data (beyond the guide — continues §2.2.1 Dataset与DataLoader类)
# The guide's eval pipeline: `CustomImageDataset` (§2.2.1) decodes a JPEG with PIL, then
# `Resize(256)`, `CenterCrop(224)`, `ToTensor` (§2.2.1) and `Normalize` with the ImageNet statistics
# (added in §2.2.2 数据增强与归一化) run on each sample. `ClassicEvalPreset` is exactly that `Compose`. To keep this notebook quick we use the first
# 192 of the 960 training images; every measurement below uses the same files.

# %%
data = ensure_data()
csv, images_dir = data.labels_csv("train"), data.images_dir("train")
guide = CustomImageDataset(csv, images_dir, ClassicEvalPreset())
subset = list(range(192))
image, label = guide[0]
assert image.shape == (3, 224, 224) and image.dtype == torch.float32
print(guide.transform, "\n", len(subset), "images")

# %% [markdown]
# ## Where the time goes (§2.1.2 数据管道在深度学习中的作用)
# §2.1.2 asks that data flow to the model without waiting. First find out what a sample costs.
# `time_stages` runs the guide's pipeline one stage at a time over 96 images and reports
# milliseconds per image.

# %%
stages = time_stages([guide.path(i) for i in subset[:96]], batch_size=32, device=device)
assert list(stages["stage"])[:2] == ["read", "decode"]
stages.round(3)

# %% [markdown]
# As a chart. On our 2-core test machine decoding the JPEG and resizing it took 60-70% of the
# time, and `ToTensor` plus `Normalize` (float maths on 150,528 values per image, done per sample)
# 20-30%; the cell prints the shares on yours. Reading the file (from the page cache) and collating
# are small; on a CPU-only machine the copy "to the device" is a no-op.

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
# ## The knobs of `DataLoader` (beyond the guide — continues §2.2.1 Dataset与DataLoader类)
# The guide says `DataLoader` "支持多线程加载" (loads with several threads), and then that
# `num_workers` is the number of *processes* (进程数). The second is right: each worker is a separate
# process with its own copy of the dataset object, and every batch it makes is sent back to the main
# process. That is why workers can use several cores despite Python's GIL, and also why they cost
# something. The guide sets `num_workers=4`; whether that helps depends on the machine, so measure.
#
# Timing helper: `time_epochs(loader, n, min_seconds=0)` runs one epoch and returns images/s.
# First `num_workers` from 0 up to the core count (at most 4 here), with and without
# `persistent_workers` (workers kept alive between epochs), two epochs of 96 images each.
# Epoch 1 pays for starting the workers.

# %%
knob_subset = Subset(guide, subset[:96])
rows = []
for workers in tqdm(range(min(cores, 4) + 1), desc="num_workers"):
    for persistent in ([False] if workers == 0 else [False, True]):
        loader = DataLoader(knob_subset, batch_size=32, num_workers=workers,
                            persistent_workers=persistent)
        speeds = [time_epochs(loader, len(knob_subset), min_seconds=0) for _ in range(2)]
        rows.append({"num_workers": workers, "persistent_workers": persistent,
                     "epoch_1": speeds[0], "epoch_2": speeds[1]})
knobs = pd.DataFrame(rows)
knobs.round(0)

# %% [markdown]
# The same numbers as a chart. With `C` cores, the per-sample work can at best run `C` times
# faster, and the main process still has to receive every batch: each worker pickles its float
# batch into shared memory and the main process unpickles it. Without `persistent_workers`, every
# epoch starts the workers again (epoch 2 pays the start-up cost again). On a machine with few cores,
# workers may well be *slower* than `num_workers=0` (they were on our 2-core test machine).

# %%
axis = knobs.set_index(["num_workers", "persistent_workers"])[["epoch_1", "epoch_2"]].plot.bar(
    figsize=(7, 2.8), rot=0, ylabel="images/s", xlabel="(num_workers, persistent_workers)")
plt.show()

# %% [markdown]
# `prefetch_factor` is how many batches each worker prepares ahead. It smooths out uneven
# batches; it cannot make the average batch faster — expect the two rows below to agree within
# the noise of a shared machine.

# %%
rows = []
for prefetch in (1, 4):
    loader = DataLoader(knob_subset, batch_size=32, num_workers=min(2, cores),
                        prefetch_factor=prefetch, persistent_workers=True)
    time_epochs(loader, len(knob_subset), min_seconds=0)  # start the workers
    rows.append({"prefetch_factor": prefetch,
                 "images_per_s": time_epochs(loader, len(knob_subset), min_seconds=0)})
pd.DataFrame(rows).round(0)

# %% [markdown]
# ## Faster formulations of the same batch (beyond the guide — continues §2.2.1 Dataset与DataLoader类)
# Four changes, each keeping the output identical (or nearly so) to the guide's batch:
#
# 1. **uint8 until the batch exists, normalize last, per batch.** `Uint8EvalDataset` returns
#    uint8 crops; `BatchNormalize` converts and normalizes a whole batch in one pass
#    (`x * scale + shift`); `NormalizedLoader` applies it after the loader (after the copy
#    to the GPU, when there is one). A uint8 batch is a quarter of the bytes.
# 2. **Faster decoding:** `torchvision.io` (libjpeg-turbo) with `transforms.v2` on uint8
#    tensors, or PIL with JPEG **draft mode**.
# 3. **Decode and resize once** into a uint8 NumPy memmap (`common.fast.cache`), then every epoch
#    only reads crops (and augments them cheaply).
# 4. **Batched fetching:** a dataset's `__getitems__(indices)` is called once per batch; the
#    cache answers it with one NumPy read instead of 32 `__getitem__` calls.
#
# First the correctness check against the guide's tensors for 32 images: the stated
# tolerances are 1e-5 for the PIL and cache paths (the same resampling; only float rounding
# differs) and two uint8 levels (2/255/std ≈ 0.035) for the torchvision decoder.

# %%
reference = torch.stack([guide[i][0] for i in range(32)])
cache = ensure_cache(guide, build / "cache_224", indices=subset)
normalize = BatchNormalize()
candidates = {
    "pil_draft_uint8": Uint8EvalDataset(csv, images_dir, decoder="pil_draft"),
    "torchvision_uint8": Uint8EvalDataset(csv, images_dir, decoder="torchvision"),
    "cache_batched": CachedImageDataset(cache.root),
}
errors = {name: (normalize(dataset.__getitems__(list(range(32)))[0]) - reference).abs().max().item()
          for name, dataset in candidates.items()}
assert errors["pil_draft_uint8"] < 1e-5 and errors["cache_batched"] < 1e-5
assert errors["torchvision_uint8"] <= 2 / 255 / 0.224
pd.Series(errors, name="max |difference|")

# %% [markdown]
# **Draft mode, where it fits.** A JPEG stores 8×8 blocks of frequencies, so the decoder can
# produce a 1/2, 1/4 or 1/8 scale image almost for free. PIL uses that when told the target
# size (`image.draft`). Our images are 200-400 px, so for `Resize(256)` there is nothing to
# gain (and the result above is bit-identical). At a training resolution of 64 px it fits:

# %%
paths = [guide.path(i) for i in subset[:96]]
small = {"full decode": DraftPilDecoder(resize_size=72, crop_size=64, draft=False),
         "draft mode": DraftPilDecoder(resize_size=72, crop_size=64, draft=True)}
draft_speed = {}
for name, decode in small.items():
    start = time.perf_counter()
    crops = [decode(path) for path in paths]
    draft_speed[name] = len(paths) / (time.perf_counter() - start)
pd.Series(draft_speed, name="images/s (decode + resize to 64 px)").round(0)

# %% [markdown]
# Same crops? Not bit-identical: the DCT-domain downscale differs from an antialiased
# resize, mostly at sharp edges. On average the crops differ by one or two uint8 levels
# (out of 255) — fine for training; for evaluation against published numbers, decode fully.

# %%
full = torch.stack([small["full decode"](p) for p in paths]).float()
drafted = torch.stack([small["draft mode"](p) for p in paths]).float()
mean_levels = (full - drafted).abs().mean().item()
assert mean_levels < 2.0
print(f"mean |difference|: {mean_levels:.2f} uint8 levels")

# %% [markdown]
# Now the benchmark of `common.fast.benchmark`, in one run on the same files: (a) the guide's
# pipeline as written, (b) each formulation at several `num_workers`, and (c) the limit —
# normalizing already-decoded uint8 batches straight from memory. Configurations are
# timed in turn, medians of repeats. Here it is small (96 images, 0 and 2 workers);
# `make bench` (or `python -m common.fast.benchmark --out build/bench`) runs the full version.

# %%
config = BenchConfig(out=build / "bench", num_images=96, repeats=2, min_seconds=0.1,
                     num_workers=(0, min(2, cores)))
table = run_benchmark(config)
result = verdict(table)
print(result)
table.round(2)

# %% [markdown]
# The same table as a chart (log scale). The cache path normalizes at a good fraction of
# the in-memory limit: after the one-off decode, an epoch is a memory copy.

# %%
plot_benchmark(table)

# %% [markdown]
# ### When workers help, and when IPC costs more than it saves
# Look at the rows of one formulation across `num_workers`. Workers help when a sample is
# *expensive to produce* (decode + resize, milliseconds per image): the work is spread
# over cores and overlaps with the training step. They hurt when a sample is *cheap* (a
# crop read from the cache, microseconds): each batch must still be pickled into shared
# memory, passed through a queue and unpickled — more work than producing it. On a 2-core
# machine the main process also competes with the workers for the same cores. Measure,
# then pick: on a 2-core machine the cache path is usually fastest with `num_workers=0`.
#
# Batch size, measured on the cache path. Two effects pull in opposite directions: every
# batch has a fixed overhead (sampler, fetch call, Python), which favours large batches;
# but each batch also allocates a fresh float tensor of `B × 602 kB`, and large buffers
# come page-faulted from the OS and no longer fit in the CPU caches, which favours small
# ones. Which wins depends on the machine — the table shows yours. (On a GPU the model's
# appetite for large batches usually decides.)

# %%
cached = CachedImageDataset(cache.root)
batch_rows = [{"batch_size": size, "images_per_s": time_epochs(
    NormalizedLoader(make_fast_loader(cached, batch_size=size)), len(cached), min_seconds=0.2)}
    for size in (4, 16, 64)]
pd.DataFrame(batch_rows).round(0)

# %% [markdown]
# ## Worker memory: a list index copies itself into every worker (beyond the guide — continues §2.2.1 Dataset与DataLoader类)
# A forked worker shares the parent's pages until it writes to them, and reading a Python
# object writes its reference count. `ListIndexDataset` keeps 200,000 `(path, label)` tuples
# in a list (like `ImageFolder.samples`); `ArrayIndexDataset` keeps the same index in two
# NumPy arrays (as `CustomImageDataset` does). Each batch reports its worker's USS (memory
# only that process holds) as the epoch proceeds.

# %%
names, labels = make_index(200_000)
memory = pd.concat([worker_memory_over_epoch(cls(names, labels), num_workers=2,
                                             batch_size=10_000).assign(index=cls.__name__)
                    for cls in (ListIndexDataset, ArrayIndexDataset)])
growth = memory.groupby(["index", "worker"])["uss_mb"].agg(lambda s: s.iloc[-1] - s.iloc[0])
assert growth["ListIndexDataset"].mean() > 3 * max(growth["ArrayIndexDataset"].mean(), 0.5)
growth.round(1)

# %% [markdown]
# Over the epoch, each list-index worker grows by the share of the index it has read; the
# NumPy-index workers stay flat. With 8 workers and millions of samples this is gigabytes.

# %%
figure, axis = plt.subplots(figsize=(7, 3))
for (index, worker), rows in memory.groupby(["index", "worker"]):
    axis.plot(rows["seen"], rows["uss_mb"], label=f"{index} worker {worker}")
axis.set_xlabel("fraction of the epoch")
axis.set_ylabel("worker USS (MiB)")
axis.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## A training loop that reports its data wait (beyond the guide — continues §2.1.2 数据管道在深度学习中的作用)
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
# crops from a 64 px cache (built once), flips them on the batch, and normalizes per batch.

# %%
slow = DataLoader(Subset(CustomImageDataset(csv, images_dir, ClassicEvalPreset(
    resize_size=72, crop_size=64)), subset), batch_size=16, shuffle=True, generator=generator)
cache_64 = ensure_cache(guide, build / "cache_64", CacheConfig(resize_size=72, crop_size=64),
                        indices=subset)
tuned = NormalizedLoader(make_fast_loader(CachedImageDataset(cache_64.root), batch_size=16,
                                          shuffle=True, generator=generator), device=device)
print(len(slow), "and", len(tuned), "batches per epoch")

# %% [markdown]
# One epoch with each (a fresh model and optimizer per loader, so the step costs the same):

# %%
waits = {}
for name, loader in tqdm({"slow (guide)": slow, "tuned (cache)": tuned}.items(), desc="loaders"):
    model = SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    waits[name] = train_metered(model, loader, optimizer, device)
waits = pd.DataFrame(waits).T
assert waits.loc["tuned (cache)", "fraction"] < waits.loc["slow (guide)", "fraction"]
waits.round(3)

# %% [markdown]
# The tuned loop spends most of its time in the model; the slow one waits for data for a
# large share of every step. (Augmenting randomly from the cache: `BatchRandomFlip`, or a
# `transform` on `CachedImageDataset` such as `v2.RandomCrop(64, padding=4)` — cheap on uint8.)

# %% [markdown]
# ## On a GPU: pinned memory, non-blocking copies, normalization on the device (beyond the guide — continues §2.1.2 数据管道在深度学习中的作用)
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
    print("skipped (no CUDA)")

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
    print("skipped (no CUDA)")

# %% [markdown]
# ## Summary
# - Measure first: in the guide's pipeline decoding and resizing dominate, and the float
#   work per sample (`ToTensor`, `Normalize`) is a sizeable extra.
# - Keep samples uint8 and normalize once per batch, last (on the GPU when there is one):
#   the same batch, fewer bytes through IPC and over the bus.
# - Decode and resize once into a uint8 memmap cache (with a manifest that notices changed
#   sources and damaged files); with batched `__getitems__` an epoch is little more than a
#   memory copy (the benchmark's verdict prints the speed-up on your machine; on our 2-core
#   test machine the full `make bench` gave over 10× the guide's images/s).
# - Workers pay off for expensive samples; for cheap ones the IPC costs more than it saves.
#   `persistent_workers` avoids restarting them every epoch; `prefetch_factor` only smooths.
# - Keep the index in NumPy arrays, not lists of Python objects, or every worker slowly
#   copies it (copy-on-read); watch the data-wait fraction of the training loop.
#
# ## Exercises
# 1. Run `make bench` (full benchmark) and compare its table with the small one above. Which
#    formulation wins at `num_workers=0`, and which at the core count?
# 2. Add `v2.RandomCrop(64, padding=4)` as the `transform` of the 64 px `CachedImageDataset`
#    and measure the data-wait fraction again. Is cheap augmentation still cheap?
# 3. Make the model step heavier (`SmallCNN(width=64)`) and rerun the training loops: how do
#    the two data-wait fractions change, and why does a faster loader matter less?
# 4. Change `ListIndexDataset` to store a list of `str` paths plus a NumPy label array. Does
#    the worker memory still grow? Why (or why not)?
