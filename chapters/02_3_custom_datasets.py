# %% [markdown]
# # Chapter 2.3 — Custom datasets, transforms, collate functions, samplers and streams
# **Guide sections:** §2.3 自定义数据管道的操作 · §2.3.1 自定义数据集的创建, then beyond the guide (it breaks off in §2.3.1)
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - The guide's `CustomDataset` with its missing pieces done properly: `get_label` from the folder name, classes numbered as `ImageFolder` numbers them.
# - Custom transforms as small classes, and why not lambdas.
# - `collate_fn` for images of different sizes.
# - A `WeightedRandomSampler` that fixes a deliberately imbalanced dataset.
# - Map-style datasets vs `IterableDataset`, and how to split a stream across workers so no sample repeats.
# - The whole pipeline feeding a training loop to over 90% validation accuracy.

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/02_3_custom_datasets.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/02_3_custom_datasets.ipynb)
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
# Imports (standard library, third party, then `common`), the seed and the device.

# %%
import hashlib
import os
import pickle
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import PIL.Image
import torch
from torch.utils.data import DataLoader, Subset
from torchvision import transforms
from torchvision.datasets import ImageFolder

from common import (
    CLASSES,
    AddGaussianNoise,
    CsvImageStream,
    CustomDataset,
    CustomImageDataset,
    PadCollate,
    PreloadedDataset,
    SmallCNN,
    balanced_sampler,
    channel_stats,
    count_parameters,
    describe_device,
    ensure_data,
    fit,
    get_device,
    is_quick_run,
    plot_class_counts,
    plot_history,
    seed_everything,
    show_images,
    sized,
)

generator = seed_everything(0)
device = get_device()
data = ensure_data()
print("device:", describe_device(device))

# %% [markdown]
# ## §2.3 自定义数据管道的操作
# ## §2.3.1 自定义数据集的创建 — the guide's code as written
# ```python
# class CustomDataset(torch.utils.data.Dataset):
#     def __init__(self, file_list, transform=None):
#         self.file_list = file_list
#         self.transform = transform
#     def __len__(self):
#         return len(self.file_list)
#     def __getitem__(self, index):
#         img_path = self.file_list[index]
#         image = PIL.Image.open(img_path).convert('RGB')
#         label = self.get_label(img_path)  # 需要实现此方法以获取标签
#         if self.transform:
#             image = self.transform(image)
#         return image, label
#
# file_list = ["path/to/image1.jpg", "path/to/image2.jpg", ...]
# custom_dataset = CustomDataset(file_list=file_list, trans…
# ```
# (The guide breaks off here.) A linter finds the names that are used but never imported.

# %%
GUIDE_2_3_1 = '''\
class CustomDataset(torch.utils.data.Dataset):
    def __init__(self, file_list, transform=None):
        self.file_list = file_list
        self.transform = transform

    def __len__(self):
        return len(self.file_list)

    def __getitem__(self, index):
        img_path = self.file_list[index]
        image = PIL.Image.open(img_path).convert('RGB')
        label = self.get_label(img_path)
        if self.transform:
            image = self.transform(image)
        return image, label
'''
workdir = Path(tempfile.mkdtemp())
(workdir / "guide_2_3_1.py").write_text(GUIDE_2_3_1)
lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                       "--select", "F821", "--output-format", "concise", "guide_2_3_1.py"],
                      cwd=workdir, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
print(lint.stdout)
assert "`PIL`" in lint.stdout and "`torch`" in lint.stdout

# %% [markdown]
# With the imports added, the class can be built, but the first sample fails: `get_label` is called and
# never defined.

# %%
class GuideCustomDataset(torch.utils.data.Dataset):  # the guide's class, imports fixed
    def __init__(self, file_list, transform=None):
        self.file_list = file_list
        self.transform = transform

    def __len__(self):
        return len(self.file_list)

    def __getitem__(self, index):
        img_path = self.file_list[index]
        image = PIL.Image.open(img_path).convert("RGB")
        label = self.get_label(img_path)
        if self.transform:
            image = self.transform(image)
        return image, label


files = sorted(str(p) for p in Path(data.imagefolder_dir("train")).glob("*/*.jpg"))
guide_dataset = GuideCustomDataset(file_list=files)
try:
    guide_dataset[0]
except AttributeError as error:
    print("AttributeError:", error)

# %% [markdown]
# ### Errata for §2.3.1
# | # | Guide | Problem | Fix |
# |---|---|---|---|
# | 1 | `PIL.Image.open(...)`, `torch.utils.data.Dataset` | neither `PIL` nor `torch` is imported in the snippet; and `import PIL` alone does not import the `PIL.Image` submodule | `from PIL import Image`, `import torch` |
# | 2 | `label = self.get_label(img_path)  # 需要实现此方法` | never implemented: `AttributeError` on the first sample | label = index of the parent folder's name among the *sorted* class names, exactly like `ImageFolder` |
# | 3 | `file_list = [..., ...]` | the literal `...` is Python's `Ellipsis` object, not a placeholder a program can use | list the files (`Path(root).glob("*/*.jpg")`) |
# | 4 | no checks | a missing file or an unknown class surfaces inside a worker mid-epoch | validate at construction, name the entry (below) |
#
# `common.CustomDataset` keeps the guide's signature (`file_list`, `transform`) and adds `classes` and
# `class_to_idx`. Given the files of an `ImageFolder` tree, it yields exactly `ImageFolder`'s samples.

# %%
custom = CustomDataset(files)
reference = ImageFolder(data.imagefolder_dir("train"))
print(custom.classes, len(custom))
assert custom.samples == reference.samples and custom.class_to_idx == reference.class_to_idx
pd.DataFrame(custom.samples[:3], columns=["path", "label"]).assign(
    path=lambda f: f.path.str.replace(str(data.root), "<data>"))

# %% [markdown]
# An unknown class or a missing file is refused at construction, with the entry named.

# %%
for bad in (dict(file_list=files[:3], classes=["star"]), dict(file_list=[*files[:2], "nope.jpg"])):
    try:
        CustomDataset(**bad)
    except ValueError as error:
        print(type(error).__name__ + ":", str(error).replace(str(data.root), "<data>")[:110])

# %% [markdown]
# ## Custom transforms
# *From here on this notebook goes beyond the guide, which breaks off in §2.3.1.*
# A transform is any callable. Written as a small class with keyword-only arguments it has a readable
# `repr`, checks its arguments, and can be pickled into worker processes. `common.AddGaussianNoise` is one.

# %%
noisy = transforms.Compose([transforms.Resize((96, 96)), transforms.ToTensor(),
                            AddGaussianNoise(std=0.15)])
print(noisy)
fig = show_images([noisy(custom[0][0]).clamp(0, 1) for _ in range(4)], ncols=4,
                  suptitle="AddGaussianNoise(std=0.15), four draws")

# %% [markdown]
# Why not `transforms.Lambda(lambda x: x + 0.1 * torch.randn_like(x))`? A lambda cannot be pickled, so
# with the `spawn` start method (macOS, Windows) the DataLoader cannot send it to its workers.

# %%
try:
    pickle.dumps(transforms.Lambda(lambda x: x + 0.1 * torch.randn_like(x)))
except (pickle.PicklingError, AttributeError) as error:
    print(type(error).__name__ + ":", error)
print("AddGaussianNoise pickles to", len(pickle.dumps(AddGaussianNoise(std=0.1))), "bytes")

# %% [markdown]
# ## `collate_fn` for variable-size images
# The default `collate_fn` stacks samples into one tensor, which needs equal shapes. Our images have
# different sizes; without a resize the default fails.

# %%
variable = CustomImageDataset(data.labels_csv("val"), data.images_dir("val"),
                              transform=transforms.Compose([transforms.Resize(48), transforms.ToTensor()]))
try:
    next(iter(DataLoader(variable, batch_size=4)))
except RuntimeError as error:
    print("RuntimeError:", str(error)[:100])

# %% [markdown]
# `common.PadCollate` pads every image of a batch to the largest height and width (bottom and right) and
# returns the original sizes too, so later code can ignore the padding. It lives in `common` for the workers.
# The whole path from the annotations CSV to a batch, with what `PadCollate` and `balanced_sampler` (below)
# return for four rows:
#
# ![From annotations CSV rows to a padded batch](figures/collate_path.svg)
#
# *Each CSV row becomes one sample of its own size in `__getitem__`; `PadCollate` pads them to the batch's largest height and width (hatched) and returns the sizes with them, and `balanced_sampler` would draw the rows by their weights w instead of in order.*

# %%
images, labels, sizes = next(iter(DataLoader(variable, batch_size=4, collate_fn=PadCollate())))
print("batch", tuple(images.shape), "| original (h, w):", sizes.tolist())
fig = show_images(list(images), [f"{CLASSES[t]} {h}x{w}" for t, (h, w) in zip(labels, sizes.tolist(), strict=True)],
                  ncols=4, size=2)

# %% [markdown]
# ## Samplers: fixing class imbalance
# Make the training set deliberately imbalanced: keep 160, 80, 40, 20, 10 and 5 images of the six
# classes. A shuffling loader reproduces the imbalance in every epoch.

# %%
train_labels = CustomImageDataset(data.labels_csv("train"), data.images_dir("train")).labels
keep = [160, 80, 40, 20, 10, 5]
indices = np.concatenate([np.flatnonzero(train_labels == c)[:n] for c, n in enumerate(keep)])
subset_labels = train_labels[indices]
before = np.bincount(subset_labels, minlength=len(CLASSES))
print(dict(zip(CLASSES, before.tolist(), strict=True)))

# %% [markdown]
# `common.balanced_sampler` gives each sample the weight `1 / count(its class)` and draws with replacement
# (`WeightedRandomSampler`). One epoch of its indices, counted by class (no image needs loading for that):

# %%
sampler = balanced_sampler(subset_labels, generator=torch.Generator().manual_seed(0))
after = np.bincount(subset_labels[list(sampler)], minlength=len(CLASSES))
print(dict(zip(CLASSES, after.tolist(), strict=True)))
assert after.min() > 0.5 * len(subset_labels) / len(CLASSES)
fig = plot_class_counts({"shuffle=True": before, "balanced_sampler": after}, CLASSES)

# %% [markdown]
# The sampler goes to the `DataLoader` in place of `shuffle=True` (the two are exclusive). Rare images now
# repeat within an epoch (the last line below counts how often), so pair the sampler with augmentation.

# %%
subset = Subset(CustomImageDataset(data.labels_csv("train"), data.images_dir("train")), indices.tolist())
loader = DataLoader(subset, batch_size=32, sampler=sampler, collate_fn=PadCollate())
print(f"{len(subset)} samples, {len(loader)} batches per epoch, drawn by {type(loader.sampler).__name__}")
print(f"each of the {keep[-1]} {CLASSES[-1]} images was drawn ~{after[-1] / keep[-1]:.0f} times in that epoch")

# %% [markdown]
# ## Map-style vs `IterableDataset`
# A map-style dataset (`__getitem__` + `__len__`) lets the sampler decide the order, so workers never
# overlap. An `IterableDataset` is a stream (lines of a file, records of a shard, a network feed): each
# worker runs its own `__iter__`, and unless it keeps only its share, every worker yields everything.
# `common.CsvImageStream` reads the annotations CSV lazily; `split_workers=False` reproduces the bug.

# %%
tiny = transforms.Compose([transforms.Resize((16, 16)), transforms.PILToTensor()])


def count_samples(stream: CsvImageStream, num_workers: int) -> Counter:
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers)
    return Counter(hashlib.sha1(image.numpy().tobytes()).hexdigest() for image, _ in loader)


naive = count_samples(CsvImageStream(data.labels_csv("val"), data.images_dir("val"), tiny,
                                     split_workers=False), num_workers=2)
split = count_samples(CsvImageStream(data.labels_csv("val"), data.images_dir("val"), tiny), 2)
print(f"naive: {sum(naive.values())} samples, {len(naive)} distinct, each seen {set(naive.values())} times")
print(f"split: {sum(split.values())} samples, {len(split)} distinct, each seen {set(split.values())} times")
assert set(split.values()) == {1} and len(split) == len(naive) == 240

# %% [markdown]
# The fix lives in `common.iterable.shard_of`, a few lines: read `torch.utils.data.get_worker_info()`, and let
# worker `w` of `n` keep rows `i` with `i % n == w` (with `rank` and `world_size` folded in for distributed
# training, Chapter 4). A stream has no `__len__` and no random access, so shuffling happens in a buffer
# (`shuffle_buffer=`), and a `DataLoader` over it takes no `sampler` and no `shuffle`.
#
# | | map-style `Dataset` | `IterableDataset` |
# |---|---|---|
# | access | `dataset[i]`, `len(dataset)` | `for sample in dataset` |
# | order | the sampler (shuffle, weights, distributed) | the stream; buffer shuffle |
# | splitting across workers | automatic (indices) | your `__iter__` (`get_worker_info`) |
# | good for | files on disk with an index | shards, databases, generated or remote data |

# %% [markdown]
# ## The whole pipeline, end to end
# Everything together on the shapes dataset. The expensive, deterministic part of the pipeline (decode and
# resize to 32x32) runs once in `common.PreloadedDataset`, which stores the pixels in one uint8 NumPy
# array; the cheap random part (flips) runs every epoch. Normalization uses the training split's own
# statistics, computed in one streaming pass.

# %%
def preload(split: str) -> PreloadedDataset:
    source = CustomImageDataset(data.labels_csv(split), data.images_dir(split), num_classes=len(CLASSES))
    return PreloadedDataset(source, size=(32, 32))


train_set, val_set = preload("train"), preload("val")
train_set.transform = transforms.ToTensor()
stats = channel_stats(DataLoader(train_set, batch_size=256))
print(f"{len(train_set)} train / {len(val_set)} val; mean {np.round(stats.mean, 3)}, std {np.round(stats.std, 3)}")

# %% [markdown]
# Training transforms: random flips (a flipped shape is the same shape), `ToTensor`, `Normalize`. Evaluation
# transforms: `ToTensor` and `Normalize` only.

# %%
normalize = transforms.Normalize(stats.mean, stats.std)
train_set.transform = transforms.Compose([transforms.RandomHorizontalFlip(), transforms.RandomVerticalFlip(),
                                          transforms.ToTensor(), normalize])
val_set.transform = transforms.Compose([transforms.ToTensor(), normalize])
train_loader = DataLoader(train_set, batch_size=32, shuffle=True, generator=generator,
                          pin_memory=device.type == "cuda")
val_loader = DataLoader(val_set, batch_size=256)
images, labels = next(iter(train_loader))
print(images.shape, images.dtype, labels[:8])

# %% [markdown]
# The model and the loop are Chapter 1's: `common.SmallCNN` (three conv blocks, global average pooling, a
# linear classifier) and `common.fit`. Only the data side is new.

# %%
model = SmallCNN(num_classes=len(CLASSES)).to(device)
print(f"{count_parameters(model):,} parameters")

# %% [markdown]
# AdamW with a one-cycle learning-rate schedule (warm up, then anneal; `fit` steps it once per epoch). Why
# 24 epochs: while writing this notebook we ran the recipe with three seeds; at 14 epochs they ended between
# 84% and 90%, at 20 epochs between 92% and 93%, at 24 epochs between 93% and 95% — we keep a margin above
# the 90% we assert, since other machines round differently (Exercise 5 repeats the check).

# %%
num_epochs = sized(24, quick=3)  # 24; 3 under `make test` (common/quick.py)
optimizer = torch.optim.AdamW(model.parameters(), lr=8e-3)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=8e-3, total_steps=num_epochs)
history = fit(model, train_loader, val_loader, optimizer=optimizer, scheduler=scheduler,
              num_epochs=num_epochs, device=device)
print(f"final validation accuracy: {history.val_acc[-1]:.3f}")
assert is_quick_run() or history.val_acc[-1] >= 0.9

# %% [markdown]
# The curves: both losses fall, and train and validation accuracy rise together (no overfitting gap).

# %%
fig = plot_history(history, title="SmallCNN on 32x32 shapes, preloaded + flips")

# %% [markdown]
# ## Summary
# - The guide's `CustomDataset` needs imports and a `get_label`; `common.CustomDataset` labels by parent folder exactly as `ImageFolder` does, and refuses bad entries at construction.
# - Transforms, collate functions and samplers are small classes or functions in an importable module, never lambdas or notebook classes, so that `spawn` workers can load them.
# - `PadCollate` batches images of different sizes; `balanced_sampler` turns a 160:5 imbalance into roughly equal classes per epoch.
# - An `IterableDataset` must split its stream by `get_worker_info()`, or every worker yields every sample.
# - Decode once, augment every epoch: the pipeline feeds Chapter 1's `SmallCNN` and `fit` to over 90% validation accuracy on a CPU.
#
# ## Exercises
# 1. Give `CustomDataset` a `classes=` list in a different order. What happens to the labels, and when would you want that?
# 2. Train on the imbalanced subset with and without `balanced_sampler` (same number of steps) and compare per-class validation accuracy.
# 3. Add `shuffle_buffer=64` to `CsvImageStream`. Are the samples still seen exactly once per epoch with two workers?
# 4. Give the model a fourth conv block (`SmallCNN`'s blocks halve the resolution: 32 → 4 pixels; a fourth lets every feature see the whole 32x32 image). How many epochs does it need to pass 90%, and what does an epoch cost?
# 5. Rerun the training with `seed_everything(s)` for s = 1, 2, 3 just before building the model. At which epoch does each run first pass 90%?
