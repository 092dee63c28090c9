# %% [markdown]
# # Chapter 2.1 — Dataset and DataLoader
# **Guide sections:** §2 构建高效的数据管道 · §2.1 数据管道的概念与重要性 · §2.1.1 数据管道定义 · §2.1.2 数据管道在深度学习中的作用 · §2.2 PyTorch中的数据加载与预处理 · §2.2.1 Dataset与DataLoader类
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - What a data pipeline is, step by step: index → file → decoded image → tensor → batch → device.
# - The guide's `CustomImageDataset` and `DataLoader` as written, what is wrong with them, and the fixes.
# - A hardened `common.CustomImageDataset` that names the CSV line of every bad input, and an opt-in skip policy that says what it skipped.
# - Why the index lives in NumPy arrays, not Python lists (copy-on-read in worker processes).
# - What each `DataLoader` option does, made visible: `batch_size`, `drop_last`, `shuffle`, `num_workers`, `pin_memory`, `generator`, `worker_init_fn`.
# - When workers pay off: a loader that waits on (network) storage, against one that is busy decoding.
#
# > **Prerequisites:** chapter 1 · **Time:** about 25 min to read, 2 min to run on a 2-core laptop · **Main path:** every section; the one titled "Going further" (what the hardened dataset refuses) is optional.

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/02_1_dataset_dataloader.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/02_1_dataset_dataloader.ipynb)
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
# Imports (standard library, third party, then `common`), the seed and the device. `seed_everything` returns a
# seeded `torch.Generator` that we hand to every `DataLoader` that shuffles.

# %%
import os
import pickle
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import transforms

from common import (
    CLASSES,
    BadSampleError,
    CustomImageDataset,
    SlowStorage,
    describe_device,
    ensure_data,
    get_device,
    load_rgb,
    seed_everything,
    seed_worker,
    show_images,
)
from common.readings import read_figure
from common.source import show_diff, show_file

generator = seed_everything(0)
device = get_device()
data = ensure_data()
print("device:", describe_device(device))

# %% tags=["parameters"]
# Sizes of this chapter's runs. `make test` runs the notebook with smaller ones (tests/notebook_parameters.py).
EPOCH_REPEATS = 3  # timed epochs per loader in the num_workers comparison, after one warm-up epoch

# %% [markdown]
# ## §2 构建高效的数据管道
# ## §2.1 数据管道的概念与重要性
# ## §2.1.1 数据管道定义 (what a data pipeline is)
# The guide defines a data pipeline as the steps that turn raw data into what the model trains on: loading,
# cleaning, preprocessing, augmentation, normalization, batching. Here are those steps done by hand for one
# sample of the synthetic dataset, timed. First, the index: the annotations CSV the guide's code expects.

# %%
frame = pd.read_csv(data.labels_csv("train"))
print(frame.shape)
frame.head(3)

# %% [markdown]
# Then each step for one sample: look up the row, open and decode the JPEG, resize, turn into a tensor,
# normalize, stack into a batch, move to the device. The function records the clock after each step.

# %%
def time_steps(idx: int) -> dict[str, float]:
    """Milliseconds spent in each pipeline step for sample ``idx``."""
    clock = [time.perf_counter()]
    name, label = frame.iloc[idx]
    clock.append(time.perf_counter())
    image = load_rgb(data.images_dir("train") / name)
    clock.append(time.perf_counter())
    small = image.resize((64, 64))
    clock.append(time.perf_counter())
    tensor = transforms.ToTensor()(small)
    clock.append(time.perf_counter())
    batch = torch.stack([transforms.Normalize([0.5] * 3, [0.25] * 3)(tensor)]).to(device)
    clock.append(time.perf_counter())
    assert batch.shape == (1, 3, 64, 64) and 0 <= label < len(CLASSES)
    steps = ["index lookup", "open + decode", "resize", "to tensor", "normalize + batch + device"]
    return dict(zip(steps, np.diff(clock) * 1e3, strict=True))


# %% [markdown]
# A single measurement is noisy (the first call of anything also pays one-time setup), so we time 30
# samples and take the median of each step. Where the time goes, and the machine it was measured on
# (`read_figure` prints a measured figure with the cores and the load average: timings depend on both):

# %%
step_ms = pd.DataFrame([time_steps(i) for i in range(30)]).median().round(3)
print(f"sample 0: {load_rgb(data.images_dir('train') / frame.file_name[0]).size} px -> (1, 3, 64, 64)")
full_size = (step_ms["open + decode"] + step_ms["resize"]) / step_ms.sum()
read_figure("02_1/steps-ms-per-image", step_ms.sum(), unit=" ms",
            what="one sample through the five steps (sum of the median steps)")
read_figure("02_1/full-size-share", 100 * full_size, unit="%",
            what="open + decode and resize, the steps that touch the full-size image")
step_ms.to_frame("median ms")

# %% [markdown]
# The same steps as a picture, with the process that runs each once a `DataLoader` does the work (chapter 3 measures what the workers buy):
#
# ![The five stages of a data pipeline](figures/pipeline_stages.svg)
#
# *A sample's way to the model: everything left of the device copy runs in a DataLoader worker, so a slow decode or transform never blocks the training loop while the workers keep up.*

# %% [markdown]
# ## §2.1.2 数据管道在深度学习中的作用 (why the pipeline matters)
# The guide names three jobs: keep data flowing so the model does not wait, catch data problems *before*
# training, and keep memory in check. In the table above, the two steps that touch the full-size image
# (open + decode, resize) take the share of the time printed under it; everything after works on 64x64 pixels. The model waits for
# those steps unless the loader prepares batches in parallel (`num_workers`, below, and Chapter 3). Problems caught early are the
# subject of the hardened dataset (its "Going further" section at the end), and memory the subject of copy-on-read. For scale: one epoch of
# this small dataset decodes this many pixels.

# %%
sizes = np.array([Image.open(data.images_dir("train") / n).size for n in frame.file_name[:200]])
mean_pixels = sizes.prod(axis=1).mean()
print(f"mean image {mean_pixels:,.0f} px; one epoch decodes ~{mean_pixels * len(frame) / 1e6:.0f} M px "
      f"to feed {len(frame) * 64 * 64 / 1e6:.1f} M px of 64x64 inputs")

# %% [markdown]
# ## §2.2 PyTorch中的数据加载与预处理
# ## §2.2.1 Dataset与DataLoader类 — the guide's code as written
# The guide's example, abridged here (`...`); the file the next cell shows holds it in full. The comment in its loop says
# "steps of model training":
#
# ```python
# from torch.utils.data import Dataset, DataLoader
# import os
# import pandas as pd
# from PIL import Image
#
# class CustomImageDataset(Dataset):
#     def __init__(self, annotations_file, img_dir, transform=None, target_transform=None):
#         self.img_labels = pd.read_csv(annotations_file)
#         ...
#     def __getitem__(self, idx):
#         img_path = os.path.join(self.img_dir, self.img_labels.iloc[idx, 0])
#         image = Image.open(img_path).convert('RGB')
#         label = self.img_labels.iloc[idx, 1]
#         ...
#
# transform = transforms.Compose([
#     transforms.Resize(256),
#     transforms.CenterCrop(224),
#     transforms.ToTensor(),
# ])
# dataset = CustomImageDataset(annotations_file="labels.csv", img_dir="path/to/images", transform=transform)
# dataloader = DataLoader(dataset, batch_size=4, shuffle=True, num_workers=4)
#
# for images, labels in dataloader:
#     # 进行模型训练的步骤
# ```
#
# Rather than eyeball it, we let Python and a linter read it. The file `scripts/02_1/guide_2_2_1.py` (beside
# this notebook) is the guide's code exactly, only its two comment lines `# Define ...` / `# Initialize ...`
# left out; compiling it is the first check.

# %%
GUIDE = Path("scripts/02_1/guide_2_2_1.py")
show_file(GUIDE)

# %% [markdown]
# Compiling it:

# %%
try:
    compile(GUIDE.read_text(encoding="utf-8"), GUIDE.name, "exec")
except SyntaxError as error:
    print(f"SyntaxError, line {error.lineno}: {error.msg}")
    syntax_error = error
assert "indented block" in syntax_error.msg

# %% [markdown]
# Python refuses to even compile it: the loop has only a comment as its body. Given a body (`pass`, in
# `guide_2_2_1_pass.py`; the diff shows the one line), the linter finds the next problem: a name used but
# never imported.

# %%
GUIDE_PASS = GUIDE.with_name("guide_2_2_1_pass.py")
show_diff(GUIDE, GUIDE_PASS)

# %%
lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                       "--select", "F821", "--output-format", "concise", GUIDE_PASS.name],
                      cwd=GUIDE.parent, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
print(lint.stdout)
assert "Undefined name `transforms`" in lint.stdout

# %% [markdown]
# ### Errata for §2.2.1
# | # | Guide | Problem | Fix |
# |---|---|---|---|
# | 1 | `transforms.Compose(...)` | `transforms` is never imported: `NameError` | `from torchvision import transforms` |
# | 2 | `for images, labels in dataloader:` followed only by a comment | a loop needs a body: `SyntaxError` | write the training step (Chapter 1's `train_one_epoch`), or `pass` |
# | 3 | `Resize(256)` + `CenterCrop(224)` as *the* transform, `shuffle=True` | that is an evaluation pipeline; used for training it has no augmentation | random crops/flips for training (Chapter 2.2) |
# | 4 | `num_workers=4` with the class defined in the script or notebook | works with `fork` (Linux's default up to Python 3.13), but the `spawn` (macOS, Windows) and `forkserver` (Linux's default from Python 3.14) start methods pickle classes by name: workers cannot find `__main__.CustomImageDataset` | define datasets, transforms and collate functions in an importable module (`common`) |
# | 5 | no validation | a wrong path, label or corrupt file surfaces mid-epoch, inside a worker, far from its cause | validate at construction, name the CSV line ("Going further", at the end) |
#
# With fixes 1 and 2 applied, the guide's class works as written. We keep its name distinct from the
# hardened one in `common`.

# %%
class GuideCustomImageDataset(Dataset):
    def __init__(self, annotations_file, img_dir, transform=None, target_transform=None):
        self.img_labels = pd.read_csv(annotations_file)
        self.img_dir = img_dir
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self):
        return len(self.img_labels)

    def __getitem__(self, idx):
        img_path = Path(self.img_dir) / self.img_labels.iloc[idx, 0]
        image = Image.open(img_path).convert("RGB")
        label = self.img_labels.iloc[idx, 1]
        if self.transform:
            image = self.transform(image)
        if self.target_transform:
            label = self.target_transform(label)
        return image, label


# %% [markdown]
# The guide's loop with a body: one batch, then stop. `num_workers=0` here because the class lives in this
# notebook (erratum 4).

# %%
guide_transform = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                                      transforms.ToTensor()])
guide_dataset = GuideCustomImageDataset(data.labels_csv("train"), data.images_dir("train"),
                                        transform=guide_transform)
for images, labels in DataLoader(guide_dataset, batch_size=4, shuffle=True, generator=generator):
    print(images.shape, images.dtype, labels)
    break
assert images.shape == (4, 3, 224, 224)

# %% [markdown]
# Erratum 3 made visible: the guide's transform has nothing random in it, so every epoch the model sees
# exactly the same pixels for a sample. A training transform draws a new crop and flip each time it is called
# (the fix; Chapter 2.2 builds a full training preset). Sample 0, loaded twice with each:

# %%
train_transform = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                                      transforms.ToTensor()])
augmented_guide = GuideCustomImageDataset(data.labels_csv("train"), data.images_dir("train"), train_transform)
views = {"guide, epoch 1": guide_dataset[0][0], "guide, epoch 2": guide_dataset[0][0],
         "random, epoch 1": augmented_guide[0][0], "random, epoch 2": augmented_guide[0][0]}
assert torch.equal(views["guide, epoch 1"], views["guide, epoch 2"])
assert not torch.equal(views["random, epoch 1"], views["random, epoch 2"])
fig = show_images(list(views.values()), list(views), ncols=4, size=2)

# %% [markdown]
# Erratum 4 made visible: `pickle` stores a class by module and name. A `spawn`ed worker (and one forked
# from a `forkserver`) starts from a fresh interpreter whose `__main__` is not this notebook, so it cannot
# find the class. `common`'s class is found
# by importing `common.data`, which works in any process.

# %%
print(pickle.dumps(GuideCustomImageDataset)[:60])
print(pickle.dumps(CustomImageDataset)[:60])
assert b"__main__" in pickle.dumps(GuideCustomImageDataset)

# %% [markdown]
# The failure itself: a fresh interpreter (what a `spawn`ed worker is) unpickles both. The notebook's class is
# not there; `common`'s is imported by name and loads.

# %%
unpickle = "import pickle, sys; print(pickle.loads(sys.stdin.buffer.read()))"
children = {cls.__name__: subprocess.run([sys.executable, "-c", unpickle], input=pickle.dumps(cls),
                                         capture_output=True) for cls in (GuideCustomImageDataset, CustomImageDataset)}
for name, child in children.items():
    print(f"{name:24} -> {(child.stdout or child.stderr.splitlines()[-1]).decode().strip()}")
assert children["GuideCustomImageDataset"].returncode != 0 and children["CustomImageDataset"].returncode == 0

# %% [markdown]
# ## §2.2.1 Dataset与DataLoader类 — the hardened `common.CustomImageDataset`
# Same signature and meaning as the guide's; in addition it checks every row at construction, and each
# error names the file and the CSV line. The CSV's failure modes — missing or extra columns, paths that leave
# the image folder, links, labels that are not classes, corrupt images, and the opt-in skip policy — are in
# the "Going further" section at the end of this chapter.

# %% [markdown]
# ## §2.2.1 Dataset与DataLoader类 — index storage and copy-on-read
# The guide keeps the whole CSV as a pandas `DataFrame` with `object` columns: one Python string object per
# file name. A DataLoader worker started by `fork` (Linux's default up to Python 3.13) is a copy of this
# process whose memory pages are shared until written. Reading a Python object *writes* its reference count, so merely iterating the index makes every
# worker copy every page that holds a string: each worker's memory grows towards the size of the whole index
# (PyTorch issue #13246). `common.CustomImageDataset` keeps the paths and labels in two NumPy arrays:
# a handful of objects in total, no per-item reference counts to touch. Count objects, not bytes: the
# NumPy buffer can even be larger (fixed-width UTF-32 strings, padded to the longest path), but it is one
# object whose pages no reader writes. (Chapter 3 measures a worker's memory growing with a list index.)

# %%
dataset = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"))
as_list = [str(dataset.path(i)) for i in range(len(dataset))]
list_bytes = sys.getsizeof(as_list) + sum(sys.getsizeof(s) for s in as_list)
print(f"Python list: {len(as_list)} objects, {list_bytes / 1e3:.0f} kB scattered over the heap")
print(f"NumPy array: 1 object, {dataset._paths.nbytes / 1e3:.0f} kB in one buffer "
      f"({dataset._paths.dtype}), labels {dataset.labels.dtype}")

# %% [markdown]
# The dataset returns what the guide's does: a PIL RGB image (no transform given) and an `int` label.

# %%
image, label = dataset[0]
print(type(image).__name__, image.mode, image.size, label, CLASSES[label])
assert image.mode == "RGB" and label == frame.label[0]

# %% [markdown]
# ## §2.2.1 Dataset与DataLoader类 — the DataLoader's options, one at a time
# A 64-pixel evaluation-style transform keeps everything fast. `batch_size` and `drop_last`: 960 samples in
# batches of 100 give 9 full batches and a last one of 60, unless `drop_last=True` drops it (useful when a
# layer such as BatchNorm dislikes tiny last batches, or for equal-sized steps in DDP).

# %%
small_transform = transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()])
dataset = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"), small_transform)
for drop_last in (False, True):
    loader = DataLoader(dataset, batch_size=100, drop_last=drop_last)
    sizes = [len(indices) for indices in loader.batch_sampler]  # indices only, no image loaded
    print(f"drop_last={drop_last}: {len(loader)} batches, last has {sizes[-1]} samples")

# %% [markdown]
# `shuffle=True` draws a new permutation every epoch from the loader's `generator`; `shuffle=False` reads in
# index order (what evaluation wants). The sampler's indices show it without loading any image.

# %%
loader = DataLoader(dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0))
epoch1, epoch2 = list(loader.sampler)[:8], list(loader.sampler)[:8]
print("epoch 1 starts with", epoch1, "\nepoch 2 starts with", epoch2)
print("no shuffle:        ", list(DataLoader(dataset, batch_size=8).sampler)[:8])
assert epoch1 != epoch2

# %% [markdown]
# `num_workers`: with 0 the main process reads and decodes every image between training steps; with `N > 0`,
# N worker processes prepare batches in parallel (each gets a copy of the dataset). Whether that pays depends
# on what a sample's time is spent on, so we measure two loaders side by side:
# - **decode-bound**: this dataset on the local disk. Reading a file takes microseconds; the time goes to
#   decoding and resizing, which keeps a CPU core busy.
# - **storage-bound**: the same dataset behind `common.SlowStorage`, which makes every read wait 20 ms first,
#   as reading a small file from a cluster's network storage does (NFS: a millisecond or more, an object
#   store: tens of milliseconds). During the wait the CPU is idle.
#
# `epoch_s` times whole epochs: the median of `EPOCH_REPEATS` (the parameters cell: 3) after a warm-up epoch, in
# wall-clock seconds and in the main process's own CPU seconds. `persistent_workers=True` keeps the workers alive between epochs, so starting
# them is left out (Chapter 3.1 measures what it costs).

# %%
def epoch_s(loader: DataLoader, repeats: int = EPOCH_REPEATS) -> tuple[float, float]:
    """Median (wall, main-process CPU) seconds of one epoch, after one warm-up epoch."""
    times = []
    for _ in range(repeats + 1):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in loader:
            pass
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return tuple(np.median(times[1:], axis=0))


workloads = {"decode-bound": Subset(dataset, range(96)),
             "storage-bound": SlowStorage(Subset(dataset, range(32)), latency_s=0.020)}
print(workloads["storage-bound"])

# %% [markdown]
# 0, 2 and 4 workers on each (several seconds in all): images/s, the main process's CPU share, and the
# speed-up over `num_workers=0`. PyTorch warns when a loader has more workers than the machine has cores;
# for workers that mostly wait, more than the cores is the point, so this cell silences just that warning.

# %%
rows = []
for workload, subset in workloads.items():
    for num_workers in (0, 2, 4):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            loader = DataLoader(subset, batch_size=4, num_workers=num_workers,
                                persistent_workers=num_workers > 0)
            wall, cpu = epoch_s(loader)
        rows.append({"workload": workload, "num_workers": num_workers,
                     "images_per_s": len(subset) / wall, "main_cpu_share": cpu / wall})
speeds = pd.DataFrame(rows).set_index(["workload", "num_workers"])
speeds["speedup"] = speeds["images_per_s"] / speeds.groupby("workload")["images_per_s"].transform("first")
speeds.round(2)

# %% [markdown]
# As a chart, and the speed-ups as readings. The storage-bound loader promises at least 1.5× with 4 workers
# on any machine (the 20 ms waits overlap whatever the cores); the decode-bound one promises nothing on a
# small machine, for the reason the next cell works out.

# %%
up = speeds["speedup"]
read_figure("02_1/storage-workers-2", up["storage-bound", 2], unit="×",
            what="2 workers against num_workers=0, reads waiting 20 ms on storage")
read_figure("02_1/storage-workers-4", up["storage-bound", 4], unit="×",
            what="4 workers against num_workers=0, reads waiting 20 ms on storage", expect=(">=", 1.5))
read_figure("02_1/decode-workers-2", up["decode-bound", 2], unit="×",
            what="2 workers against num_workers=0, decoding on the local disk")
read_figure("02_1/decode-workers-4", up["decode-bound", 4], unit="×",
            what="4 workers against num_workers=0, decoding on the local disk")
fig = up.unstack("num_workers").plot.bar(
    rot=0, figsize=(6, 2.8), ylabel="x num_workers=0", title="speed-up from workers").figure

# %% [markdown]
# Why they differ, from the same numbers. First, what one image costs the decode-bound loader with
# `num_workers=0`, in two clocks. Its *wall-clock* time per image comes from whole epochs, so it includes any
# time the process spent waiting for a core that other programs held; its *CPU* time per image (wall time ×
# the main process's CPU share in the table) is the decoding work itself. The CPU figure is the one to set
# beside the stage timer's sum above, which measured about the same work (each adds its own small per-sample
# costs): medians of short steps mostly fall between such waits. On a quiet machine the three are close (the
# CPU share is then near 100 %); on a busy one the wall-clock figure is the larger, by the factor the CPU
# share shows.

# %%
in_process = speeds.loc[("decode-bound", 0)]
read_figure("02_1/loader-ms-per-image", 1e3 / in_process["images_per_s"], unit=" ms",
            what="one image through the decode-bound loader, num_workers=0, wall clock")
read_figure("02_1/loader-cpu-ms-per-image", 1e3 * in_process["main_cpu_share"] / in_process["images_per_s"],
            unit=" ms", what="the same image in the main process's CPU time (the work itself)")
print(f"the stage timer's steps for one image: {step_ms.sum():.1f} ms; main process busy "
      f"{in_process['main_cpu_share']:.0%} of the wall-clock time at num_workers=0")

# %% [markdown]
# A worker waiting on storage uses no CPU, so N workers keep N reads in flight even on few cores: the
# speed-up tends to N until the decoding left over fills the cores. A decode-bound worker needs a core of its
# own, and the workers share the cores with the main process, which receives every batch (its CPU share is
# in the table). So the workers can use at most `cores - main share` cores: that is the ceiling on the
# speed-up, printed for this machine. Any gap below the ceiling is other work on the same cores (the
# readings above print the load average). Where there are more cores than workers (a training node has
# 8–64), the ceiling is the number of workers.

# %%
cores = os.cpu_count()
for num_workers in (2, 4):
    main = speeds.loc[("decode-bound", num_workers), "main_cpu_share"]
    ceiling = min(num_workers, cores - main)
    print(f"decode-bound, {num_workers} workers: main process {main:.0%} busy; ceiling min({num_workers}, "
          f"{cores} - {main:.2f}) = {ceiling:.1f}x, measured {up['decode-bound', num_workers]:.1f}x")
print(f"this machine: {cores} cores,", "fewer than 4 workers + the main process need: decoding cannot spread"
      " further" if cores < 5 else "enough for 4 workers + the main process")

# %% [markdown]
# `pin_memory=True` makes the loader return batches in page-locked host memory, from which a CUDA copy can
# run asynchronously (`.to(device, non_blocking=True)`). It only matters with a CUDA device.

# %%
pinned = DataLoader(dataset, batch_size=4, pin_memory=torch.cuda.is_available())
images, labels = next(iter(pinned))
print(f"device {device.type}: batch pinned = {images.is_pinned()}")

# %% [markdown]
# Reproducibility: the `generator` fixes the shuffle order and the base seed of every worker. Each worker
# then seeds `random`, torch and NumPy's global generator itself, from that base seed plus its worker id
# (PyTorch has done so since 1.9, in `torch/utils/data/_utils/worker.py`). `worker_init_fn=seed_worker`
# (from `common`, so workers can import it) repeats the NumPy and `random` seeding, as PyTorch's
# reproducibility notes show; it matters on older versions and is the place for any other per-worker set-up.
# Two loaders built the same way yield the same first batches, random augmentation included.

# %%
augment = transforms.Compose([transforms.RandomResizedCrop(64), transforms.ToTensor()])
augmented = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"), augment)


def first_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    loader = DataLoader(augmented, batch_size=8, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(seed), worker_init_fn=seed_worker)
    return next(iter(loader))


(a, la), (b, lb), (c, lc) = first_batch(1), first_batch(1), first_batch(2)
print("same seed, same batch:", torch.equal(a, b) and torch.equal(la, lb),
      "| other seed, same batch:", torch.equal(a, c))
assert torch.equal(a, b) and not torch.equal(a, c)

# %% [markdown]
# One batch, looked at: images with their class names.

# %%
fig = show_images(list(a), [CLASSES[t] for t in la], ncols=8, suptitle="first shuffled batch (seed 1)")

# %% [markdown]
# ## Going further: what `common.CustomImageDataset` refuses
# Each kind of bad input, built on purpose, and the error it gets. First a scratch folder: two good images, a
# file that is not a JPEG, and a symbolic link to a file outside the folder.

# %%
workdir = Path(tempfile.mkdtemp())
scratch = workdir / "images"
scratch.mkdir()
for i in range(2):
    load_rgb(data.images_dir("train") / frame.file_name[i]).save(scratch / f"ok{i}.jpg")
(scratch / "broken.jpg").write_bytes(b"not a jpeg at all")
(workdir / "secret.jpg").write_bytes((scratch / "ok0.jpg").read_bytes())
(scratch / "link.jpg").symlink_to(workdir / "secret.jpg")
sorted(p.name for p in scratch.iterdir())

# %% [markdown]
# One annotations CSV per kind of bad input (`<tmp>` stands for the scratch folder):

# %%
cases = {
    "missing column": "file_name\nok0.jpg\n",
    "extra column": "file_name,label,extra\nok0.jpg,1,x\n",
    "empty CSV": "",
    "no header": "ok0.jpg,1\nok1.jpg,2\n",
    "missing file": "file_name,label\nok0.jpg,1\nnope.jpg,2\n",
    "'..' path": "file_name,label\n../secret.jpg,1\n",
    "absolute path": f"file_name,label\n{workdir / 'secret.jpg'},1\n",
    "symlink out": "file_name,label\nlink.jpg,1\n",
    "label not an integer": "file_name,label\nok0.jpg,circle\n",
    "unknown label": "file_name,label\nok0.jpg,1\nok1.jpg,9\n",
}
pd.Series(cases, name="labels.csv").str.replace(str(workdir), "<tmp>").str.replace("\n", " ⏎ ").to_frame()

# %% [markdown]
# Build a dataset from each CSV (`num_classes=6` makes label 9 "unknown") and collect the errors.

# %%
messages = {}
for case, text in cases.items():
    (workdir / "labels.csv").write_text(text)
    try:
        CustomImageDataset(workdir / "labels.csv", scratch, num_classes=len(CLASSES))
    except BadSampleError as error:
        messages[case] = str(error).replace(str(workdir), "<tmp>")
assert len(messages) == len(cases)
pd.set_option("display.max_colwidth", 120)
pd.DataFrame({"error": messages})

# %% [markdown]
# A corrupt image cannot be caught by reading the CSV; it fails when decoded, naming file and line.
# (`check_images=True` decodes everything at construction instead, at the cost of a full pass.)

# %%
(workdir / "labels.csv").write_text("file_name,label\nok0.jpg,1\nbroken.jpg,2\n")
lazy = CustomImageDataset(workdir / "labels.csv", scratch)
try:
    lazy[1]
except BadSampleError as error:
    print(str(error).replace(str(workdir), "<tmp>"))

# %% [markdown]
# The opt-in skip policy: `on_bad="skip"` leaves bad rows out, but warns with their CSV lines and keeps the
# full list with reasons in `.skipped`. Never a silent skip.

# %%
(workdir / "labels.csv").write_text(
    "file_name,label\nok0.jpg,1\nnope.jpg,2\nok1.jpg,x\nok1.jpg,3\nbroken.jpg,4\n")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    skipping = CustomImageDataset(workdir / "labels.csv", scratch, on_bad="skip", check_images=True)
print(str(caught[0].message).split(";")[0].replace(str(workdir), "<tmp>"))
assert len(skipping) == 2 and skipping.skipped.line.tolist() == [3, 4, 6]
skipping.skipped.assign(reason=skipping.skipped.reason.str.replace(str(workdir), "<tmp>"))

# %% [markdown]
# ## Summary
# - A data pipeline is a chain: index → file → decode → transform → collate → device; decoding dominates.
# - The guide's §2.2.1 code needs an import and a loop body, and its `Resize+CenterCrop` is an evaluation pipeline.
# - `common.CustomImageDataset` keeps the guide's signature but validates every row and names the CSV line; skipping bad rows is opt-in and reported.
# - Index data lives in NumPy arrays so that forked workers do not copy it on read.
# - Workers pay off most when reads wait on storage (`SlowStorage`: the waits overlap, even on 2 cores); for decoding each worker needs a spare core besides the main process's.
# - `generator` + `worker_init_fn=seed_worker` make a loader's batches reproducible; anything a worker needs lives in `common`.
#
# ## Further reading
# - [`torch.utils.data`](https://pytorch.org/docs/stable/data.html): every `DataLoader` option used here, map-style and iterable datasets, multi-process loading and its start methods, memory pinning.
# - [Datasets & DataLoaders tutorial](https://pytorch.org/tutorials/beginner/basics/data_tutorial.html): the official version of the guide's `CustomImageDataset`, with a loader and a first look at batches.
# - [Reproducibility notes](https://pytorch.org/docs/stable/notes/randomness.html#dataloader): seeding workers with `worker_init_fn` and a `generator`, as `seed_worker` does.
# - [Performance tuning guide](https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html): asynchronous loading with `num_workers`, `pin_memory` and other first things to try (Chapter 3.1 measures them).
#
# ## Exercises
# 1. Add a row with label `07` to a copy of `labels.csv`. Does it load? Should it? Change `num_classes` and try again.
# 2. Time `DataLoader(dataset, batch_size=64, num_workers=n)` for n = 0, 1, 2, 4 on your machine and plot images/s.
# 3. Remove `generator=` from `first_batch` and run the reproducibility cell twice. What changes, and why?
# 4. Start the notebook's loader with `multiprocessing_context="spawn"` and `GuideCustomImageDataset`. Read the error.

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. In the chapter's step-by-step timing of one sample, which steps took most of the time, and why those?
# 2. The guide's `CustomImageDataset` example fails before it trains anything. Which two fixes make it run?
# 3. Why is the guide's `Resize(256)` + `CenterCrop(224)` the wrong transform for training, and what replaces it?
# 4. A `DataLoader` with `num_workers=4` over a Dataset class defined in the notebook works on Linux with Python 3.13 but fails on macOS. Why, and what is the fix?
# 5. Why does `common.CustomImageDataset` keep paths and labels in NumPy arrays rather than the guide's pandas `DataFrame` of Python strings?
# 6. With 960 samples and `batch_size=100`, how many batches does an epoch have with `drop_last=False` and with `drop_last=True`, and when would you want the latter?
# 7. The chapter timed 0, 2 and 4 workers on a decode-bound and a storage-bound loader. Which one gained from workers, and why?
# 8. What makes two loaders yield the same shuffled batches, random augmentation in the workers included?
# 9. What does `common.CustomImageDataset` do with a bad row of the annotations CSV by default, what changes with `on_bad="skip"`, and when is a corrupt image found?
# 10. What does `pin_memory=True` do, and when does it matter?
