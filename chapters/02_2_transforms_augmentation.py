# %% [markdown]
# # Chapter 2.2 — Transforms, augmentation and normalization
# **Guide sections:** §2.2 PyTorch中的数据加载与预处理 · §2.2.2 数据增强与归一化
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - What the guide's `transforms.Compose([Resize, ToTensor, Normalize])` really does to the pixels, and two errors in its comments.
# - The common augmentations (rotation, scale, crop, flip, colour jitter), seen on one image.
# - Train and eval presets as small picklable classes, with the classic API and with `transforms.v2`.
# - How to compute your dataset's per-channel mean and std in one streaming pass, and how it compares with the ImageNet constants the guide uses.
#
# > **Prerequisites:** chapter 2.1 · **Time:** about 15 min to read, 1 min to run on a 2-core laptop · **Main path:** every section; none is optional.

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/02_2_transforms_augmentation.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/02_2_transforms_augmentation.ipynb)
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
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.transforms import v2

from common import (
    CLASSES,
    IMAGENET_MEAN,
    IMAGENET_STD,
    ClassicEvalPreset,
    ClassicTrainPreset,
    CustomImageDataset,
    V2EvalPreset,
    V2TrainPreset,
    channel_stats,
    describe_device,
    ensure_data,
    get_device,
    seed_everything,
    show_images,
)

generator = seed_everything(0)
device = get_device()
data = ensure_data()
print("device:", describe_device(device))

# %% [markdown]
# ## §2.2 PyTorch中的数据加载与预处理
# ## §2.2.2 数据增强与归一化 — the guide's code as written
# ```python
# from torchvision import transforms
#
# # 常用的图像变换操作
# data_transforms = transforms.Compose([
#     transforms.Resize((224, 224)),  # 调整图片大小
#     transforms.ToTensor(),  # 将PIL Image或NumPy ndarray转换为Tensor，并进行归一化
#     transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
# ])
#
# # 使用上面定义的变换
# custom_dataset = CustomImageDataset(annotations_file="labels.csv", img_dir="path/to/images", transform=data_transforms)
# dataloader = DataLoader(custom_dataset, batch_size=4, shuffle=True, num_workers=4)
# ```
# It runs as written (this section does import `transforms`). We run it on our data with `common`'s
# `CustomImageDataset` (Chapter 2.1 explains why a worker needs the class from a module) and 2 workers,
# one per core of a small machine.

# %%
data_transforms = transforms.Compose([
    transforms.Resize((224, 224)),
    transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
])
custom_dataset = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"), transform=data_transforms)
dataloader = DataLoader(custom_dataset, batch_size=4, shuffle=True, num_workers=2, generator=generator)
images, labels = next(iter(dataloader))
print(images.shape, images.dtype, labels)

# %% [markdown]
# Now the same transform step by step, on one image of the training set, looking at the numbers after each
# step. First `Resize((224, 224))`:

# %%
dataset = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"))
image, label = dataset[0]
resized = data_transforms.transforms[0](image)
print(f"original {image.size} (w, h) -> Resize((224, 224)) -> {resized.size}")

# %% [markdown]
# `ToTensor` converts the uint8 HWC image to a float CHW tensor and divides by 255. That is all: the values
# land in [0, 1], with whatever mean and spread the image had. `Normalize` then subtracts ImageNet's mean and
# divides by ImageNet's std; whether the result has mean 0 and std 1 depends on the image (second column).

# %%
as_tensor = transforms.ToTensor()(resized)
normalized = data_transforms(image)
rows = {"after ToTensor": as_tensor, "after Normalize": normalized}
pd.DataFrame({name: {"dtype": str(t.dtype), "min": f"{t.min():.3f}", "max": f"{t.max():.3f}",
                     "mean": f"{t.mean():.3f}", "std": f"{t.std():.3f}"} for name, t in rows.items()})

# %% [markdown]
# ### Errata for §2.2.2
# | # | Guide | Problem | Fix |
# |---|---|---|---|
# | 1 | `ToTensor()` comment: "转换为Tensor，并进行归一化" (converts *and normalizes*) | `ToTensor` only rescales uint8 to [0, 1] (and HWC → CHW); normalization is `Normalize`'s job (table above) | read it as "converts and scales to [0, 1]" |
# | 2 | `Resize((224, 224))` "调整图片大小" | a `(h, w)` tuple forces that size and distorts the aspect ratio (a 2:1 image is squashed); `Resize(224)` scales the shorter side and keeps it | `Resize(256)` + `CenterCrop(224)` for evaluation, `RandomResizedCrop(224)` for training — or squash on purpose, knowing it |
# | 3 | "Normalize … 归一化到指定的均值和标准差" | `Normalize` computes `(x - mean) / std`; the output has mean 0 and std 1 only if `mean`/`std` *are* the data's statistics | compute the statistics of your training set (below) or use ImageNet's when fine-tuning an ImageNet model |
# | 4 | the section is about augmentation, but no transform is random; §2.2.1 trains with `Resize(256)+CenterCrop(224)` | the model sees the same pixels every epoch: no augmentation at all | random transforms in the *training* pipeline only (gallery and presets below) |
#
# Erratum 1, checked against NumPy: `ToTensor` is exactly a transpose to CHW and a division by 255.

# %%
pixels = torch.from_numpy(np.array(resized)).permute(2, 0, 1).float()  # HWC uint8 -> CHW float
assert torch.allclose(as_tensor, pixels / 255)
assert as_tensor.min() >= 0 and as_tensor.max() <= 1 and abs(as_tensor.mean() - 0.5) > 0.01
print("ToTensor(x) == x / 255: True")

# %% [markdown]
# Erratum 3 in the table above: this image, normalized with ImageNet's constants, is not centred at 0 with
# spread 1. The fix (the dataset's own statistics) comes at the end of this notebook.

# %%
print(f"after Normalize: mean {normalized.mean():.3f}, std {normalized.std():.3f}")
assert abs(normalized.std() - 1) > 0.1

# %% [markdown]
# Erratum 2, seen: `Resize((224, 224))` squashes a non-square image; `Resize(224)` scales the shorter side and
# keeps the proportions, and `CenterCrop(224)` then cuts a square from the middle without distortion. We take
# the widest of the first 100 training images so the difference is easy to see.

# %%
sizes = [Image.open(dataset.path(i)).size for i in range(100)]  # (w, h), header only: no decode
widest = max(range(100), key=lambda i: sizes[i][0] / sizes[i][1])
wide_image = dataset[widest][0]
resizes = {"original": wide_image, "Resize((224, 224))": transforms.Resize((224, 224))(wide_image),
           "Resize(224)": transforms.Resize(224)(wide_image),
           "+ CenterCrop(224)": transforms.CenterCrop(224)(transforms.Resize(224)(wide_image))}
fig = show_images(list(resizes.values()), [f"{k}\n{v.size}" for k, v in resizes.items()], ncols=4, size=2.4)

# %% [markdown]
# ## §2.2.2 数据增强与归一化 — augmentations on the same image
# The guide names rotation, scaling, cropping and flipping; colour jitter is the usual fifth. Each row applies
# one random transform six times to the same image, so you see its range. For shapes, all of these keep the
# label: a rotated or recoloured triangle is still a triangle. (A flipped "6" would not be a "6": choose
# augmentations that preserve *your* labels.) The last row is the training preset built below.

# %%
thumb = transforms.Resize(96)(image)
augmentations = {
    "rotation ±45°": transforms.RandomRotation(45),
    "scale 0.6-1.4": transforms.RandomAffine(0, scale=(0.6, 1.4)),
    "random crop": transforms.RandomCrop(72),
    "flip": transforms.Compose([transforms.RandomHorizontalFlip(), transforms.RandomVerticalFlip()]),
    "colour jitter": transforms.ColorJitter(0.5, 0.5, 0.5, 0.1),
    # mean 0, std 1: Normalize becomes the identity, so the picture shows the augmentation alone
    "ClassicTrainPreset": transforms.Compose([
        ClassicTrainPreset(crop_size=96, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)),
        transforms.ToPILImage()]),
}
list(augmentations)

# %% [markdown]
# Six draws of each. The preset row combines crop-and-scale, flip, rotation and colour jitter; we built it
# with an identity `Normalize` (mean 0, std 1) for this picture, because `ToPILImage` on normalized values
# (which go below 0 and above 1) would wrap them around and show speckled, false colours.

# %%
gallery = [augment(thumb) for augment in augmentations.values() for _ in range(6)]
titles = [name if i == 0 else "" for name in augmentations for i in range(6)]
fig = show_images(gallery, titles, ncols=6, size=1.4, suptitle=f"one {CLASSES[label]} image, augmented")

# %% [markdown]
# ## §2.2.2 数据增强与归一化 — presets: classic and `transforms.v2`
# `common.transforms` wraps the two pipelines every project needs as small classes with keyword-only
# arguments (picklable, so DataLoader workers can receive them). The training preset is random; the
# evaluation preset is the guide's `Resize + CenterCrop + ToTensor + Normalize`.

# %%
train_preset, eval_preset = ClassicTrainPreset(crop_size=64), ClassicEvalPreset(resize_size=72, crop_size=64)
print(train_preset)
print(eval_preset)

# %% [markdown]
# `transforms.v2` is torchvision's current API. Its presets replace `ToTensor()` by two explicit steps:
# `ToImage()` (PIL or ndarray -> uint8 tensor image) and `ToDtype(torch.float32, scale=True)` (-> floats in
# [0, 1]). They accept PIL images and uint8 tensors alike and do the geometry on uint8 (usually the faster
# path; Chapter 3 measures pipelines). The two v2 presets of the next cell, step by step, as
# `common.diagrams` finds them by running each step with several seeds (a step whose output changes is random):
#
# ![The v2 training and evaluation presets, step by step](figures/transform_pipeline.svg)
#
# *Only the training preset's middle steps are random (a new crop, flip, rotation and colour on every call, so each epoch sees new images); both presets start with `ToImage` and end with `ToDtype` and `Normalize`, and all of it runs in `__getitem__`, in the worker.*
#
# What each contains, and on the same input the eval presets agree up to resampling differences:

# %%
v2_eval = V2EvalPreset(resize_size=72, crop_size=64)
print(V2TrainPreset(crop_size=64))
print(v2_eval)
classic_out, v2_out = eval_preset(image), v2_eval(image)
difference = (classic_out - v2_out).abs()
print(f"shape {tuple(v2_out.shape)}; mean |classic - v2| = {difference.mean():.4f}, "
      f"max = {difference.max():.3f}")
assert classic_out.shape == v2_out.shape == (3, 64, 64) and difference.mean() < 0.05

# %% [markdown]
# The v2 training preset also works straight on a uint8 tensor, e.g. what `torchvision.io.decode_jpeg` returns.

# %%
uint8_image = v2.PILToTensor()(image)
out = V2TrainPreset(crop_size=64)(uint8_image)
print(uint8_image.dtype, tuple(uint8_image.shape), "->", out.dtype, tuple(out.shape))
assert out.dtype == torch.float32 and out.shape == (3, 64, 64)

# %% [markdown]
# ## §2.2.2 数据增强与归一化 — your dataset's statistics
# The guide notes that `Normalize`'s mean and std "are usually set from statistics of the whole dataset",
# then uses ImageNet's. `common.channel_stats` computes ours in one streaming pass over a `DataLoader`:
# it folds each batch into running (count, mean, sum of squared deviations) in float64, so it never holds
# the dataset in memory and is numerically stable (the tests check it against NumPy). Statistics come from
# the *training* split only.

# %%
stats_transform = transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()])
stats_set = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"), stats_transform)
stats = channel_stats(DataLoader(stats_set, batch_size=64, num_workers=2), progress=True)
comparison = pd.DataFrame({"shapes mean": stats.mean, "ImageNet mean": IMAGENET_MEAN,
                           "shapes std": stats.std, "ImageNet std": IMAGENET_STD},
                          index=["R", "G", "B"]).round(3)
comparison

# %% [markdown]
# A quick cross-check on one batch: the streaming result equals a direct computation.

# %%
batch = next(iter(DataLoader(stats_set, batch_size=32)))[0]
one = channel_stats([batch])
direct_mean, direct_std = batch.mean(dim=(0, 2, 3)), batch.std(dim=(0, 2, 3), correction=0)
print([round(m, 4) for m in one.mean], direct_mean.numpy().round(4))
assert torch.allclose(torch.tensor(one.std, dtype=torch.float32), direct_std, atol=1e-5)

# %% [markdown]
# The effect of normalization, on the pixels of 64 training images: `ToTensor` output in [0, 1]; normalized
# with ImageNet's constants; normalized with the dataset's own statistics. `Normalize` shifts and scales each
# channel and changes nothing else, so the *shape* of a channel's histogram is the same before and after:
# what normalization sets is where each channel sits and how wide it spreads. The chart shows exactly that,
# each channel's mean (dot) and one standard deviation either side (bar), against the target of
# `Normalize`: mean 0 (the line), spread 1 (the grey band).

# %%
images = torch.stack([stats_set[i][0] for i in range(64)])
by_imagenet = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)(images)
by_dataset = transforms.Normalize(stats.mean, stats.std)(images)
groups = {"ToTensor: [0, 1]": images, "Normalize(ImageNet)": by_imagenet, "Normalize(dataset stats)": by_dataset}
fig, axis = plt.subplots(figsize=(8, 3))
axis.axhspan(-1, 1, color="0.9", label="target: mean 0, std 1")
axis.axhline(0, color="black", linewidth=0.8)
for g, batch in enumerate(groups.values()):
    for c, (name, colour) in enumerate(zip("RGB", ("tab:red", "tab:green", "tab:blue"), strict=True)):
        values = batch[:, c]
        axis.errorbar(g + (c - 1) * 0.15, values.mean(), yerr=values.std(), fmt="o", capsize=4, color=colour,
                      label=name if g == 0 else None)
axis.set_xticks(range(len(groups)), list(groups))
axis.set_ylabel("channel mean ± std")
axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Look at the middle group: with ImageNet's constants the blue dot sits well above the line and every bar
# reaches past the grey band. Our images are bluer and more spread out than ImageNet's (the table above), so
# ImageNet's mean leaves the blue channel shifted and its std leaves every spread too wide. In the right
# group, with the dataset's own statistics, every channel is centred near 0 with spread near 1. The numbers
# behind the chart are below. For training from scratch use your own statistics; when fine-tuning a network
# pretrained on ImageNet, keep ImageNet's (the network learned on inputs normalized that way).

# %%
summary = pd.DataFrame({
    "ImageNet: mean": by_imagenet.mean(dim=(0, 2, 3)), "ImageNet: std": by_imagenet.std(dim=(0, 2, 3)),
    "dataset: mean": by_dataset.mean(dim=(0, 2, 3)), "dataset: std": by_dataset.std(dim=(0, 2, 3)),
}, index=["R", "G", "B"]).round(3)
assert (by_dataset.std(dim=(0, 2, 3)) - 1).abs().max() < 0.15
summary

# %% [markdown]
# ## Summary
# - `ToTensor` converts and scales to [0, 1]; `Normalize` computes `(x - mean) / std`. Neither makes data "normal" by itself.
# - `Resize((h, w))` squashes, `Resize(n)` keeps the aspect ratio; evaluation is `Resize + CenterCrop`, training adds random crops, flips, rotations and colour jitter.
# - Augment only the training pipeline, and only with transforms that preserve the label.
# - `common.channel_stats` computes per-channel mean/std in one streaming pass; use your data's statistics when training from scratch, ImageNet's when fine-tuning.
#
# ## Further reading
# - [torchvision transforms](https://pytorch.org/vision/stable/transforms.html): the v1 and v2 APIs side by side, which transforms exist, and the performance advice (uint8 tensors, v2).
# - [Getting started with transforms v2](https://pytorch.org/vision/stable/auto_examples/transforms/plot_transforms_getting_started.html): `ToImage`, `ToDtype(scale=True)` and how v2 transforms take images, boxes and masks together.
# - [Illustration of transforms](https://pytorch.org/vision/stable/auto_examples/transforms/plot_transforms_illustrations.html): a gallery like this chapter's, for every built-in augmentation.
# - [Datasets & DataLoaders tutorial](https://pytorch.org/tutorials/beginner/basics/data_tutorial.html) and [Transforms tutorial](https://pytorch.org/tutorials/beginner/basics/transforms_tutorial.html): where `transform` and `target_transform` plug into a `Dataset`.
#
# ## Exercises
# 1. Compute the statistics at 32 and at 128 pixels. Do they change? Why barely?
# 2. Add `transforms.RandomErasing()` to the gallery. Where in the pipeline must it go, and why?
# 3. Compare the time per image of `ClassicTrainPreset` and `V2TrainPreset` on PIL input and on uint8 tensors.
# 4. Which augmentation in the gallery would be wrong for handwritten digits? For street signs?

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. What exactly does `ToTensor()` do to a uint8 PIL image, and what does it not do, despite the guide's comment?
# 2. What does `Normalize(mean, std)` compute, and when does its output have mean 0 and standard deviation 1?
# 3. What is the difference between `Resize((224, 224))` and `Resize(224)`, and which transforms make up an evaluation pipeline and a training pipeline?
# 4. Which pipeline do you augment, and with which augmentations?
# 5. Why was the augmentation gallery's `ClassicTrainPreset` row built with mean 0 and std 1?
# 6. What does `transforms.v2` use instead of `ToTensor()`, and which inputs do its presets accept?
# 7. How does `common.channel_stats` compute the per-channel mean and standard deviation, and from which split?
# 8. What did the chapter measure when it normalized 64 training images with ImageNet's constants and with the dataset's own statistics?
# 9. When should you normalize with ImageNet's statistics rather than your own?
