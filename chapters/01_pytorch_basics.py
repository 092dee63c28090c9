# %% [markdown]
# # Chapter 1 — PyTorch and deep-learning basics
# **Guide sections:** §1 PyTorch简介与深度学习基础 · §1.1 深度学习的基本概念 · §1.2 PyTorch的框架和特点
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - What "deep learning" means in practice: a stack of layers that learns its own features from data.
# - Tensors and devices: the same code on a CPU or a GPU.
# - Autograd and the *dynamic* computation graph that makes PyTorch PyTorch.
# - `nn.Module`, a loss, an optimizer, and a complete training loop with a progress bar and curves.
# - Saving and loading weights.
#
# Everything runs on the synthetic shapes dataset that `make data` writes (no downloads).
#
# > **Prerequisites:** Python and NumPy; no deep learning yet · **Time:** about 20 min to read, 1 min to run on a 2-core laptop · **Main path:** every section; this chapter has no optional ones.

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/01_pytorch_basics.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/01_pytorch_basics.ipynb)
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
# Imports first (standard library, third party, then this repository's `common` package), then the seed
# and the device. `get_device()` picks CUDA when present, then Apple's MPS, then the CPU.

# %%
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from PIL import Image, ImageOps
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from common import (
    CLASSES,
    History,
    SmallCNN,
    count_parameters,
    describe_device,
    ensure_data,
    fit,
    get_device,
    plot_history,
    seed_everything,
    show_images,
)
from common.tools.doctor import summary

generator = seed_everything(0)
device = get_device()
print("torch", torch.__version__, "| device:", describe_device(device))

# %% [markdown]
# The environment doctor's short form: the versions, the device, and whether the data is ready (a line more
# if another check found a problem). If anything below fails, run `python -m common.tools.doctor` (or `make doctor`)
# in a terminal: its full report checks the interpreter, every package, `/dev/shm` and more, with a fix for
# each problem.

# %%
print(summary())

# %% [markdown]
# ## §1 PyTorch简介与深度学习基础
# ## §1.1 深度学习的基本概念 (basic concepts of deep learning)
# The guide describes deep learning as *multi-layer neural networks that learn features from data by
# themselves, instead of hand-designed features*. Our task throughout the repository: tell six shapes apart
# in noisy images of varying size, colour, position and tilt. First make sure the data exists
# (it is generated offline in a few seconds the first time).

# %%
data = ensure_data()
labels_frame = pd.read_csv(data.labels_csv("train"))
print(len(labels_frame), "training images;", "classes:", CLASSES)
labels_frame.head()

# %% [markdown]
# A look at the first twelve training images with their labels. No rule such as "count the corners" is
# written anywhere: the network has to discover such features itself.

# %%
samples = [Image.open(data.images_dir("train") / name) for name in labels_frame.file_name[:12]]
show_images(samples, [f"{CLASSES[y]} {im.size}" for im, y in zip(samples, labels_frame.label, strict=False)],
            ncols=6, size=1.8);

# %% [markdown]
# ## §1.2 PyTorch的框架和特点 (PyTorch's framework and features) — tensors and devices
# A tensor is an n-dimensional array that knows its `dtype` and the device it lives on. An image becomes a
# `(channels, height, width)` tensor; a batch adds a leading dimension.

# %%
image = torch.from_numpy(np.array(samples[0])).permute(2, 0, 1)
print(image.dtype, tuple(image.shape), image.device)
batch = torch.stack([image[:, :32, :32]] * 4).float() / 255
assert batch.shape == (4, 3, 32, 32)
print("batch", tuple(batch.shape), "range", batch.min().item(), "-", batch.max().item())

# %% [markdown]
# Moving to the device is one call; operations run where their inputs are.

# %%
on_device = batch.to(device)
print("mean per channel on", on_device.device, ":", on_device.mean(dim=(0, 2, 3)).cpu().tolist())

# %% [markdown]
# NumPy arrays and CPU tensors can share memory (`torch.from_numpy`), so a change to one is visible in the
# other — no copy was made:

# %% tags=["nbval-check-output"]
array = np.zeros(3, dtype=np.float32)
shared = torch.from_numpy(array)
array[0] = 7.0
assert shared[0].item() == 7.0
shared

# %% [markdown]
# ### Autograd
# Every operation on a tensor with `requires_grad=True` is recorded; `backward()` walks the record
# backwards and fills `.grad`. For $y = \sum_i x_i^2$ the gradient is $2x$ — autograd agrees.

# %% tags=["nbval-check-output"]
x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
y = (x**2).sum()
y.backward()
print("dy/dx =", x.grad.tolist())
assert torch.equal(x.grad, 2 * x.detach())

# %% [markdown]
# ### The dynamic computation graph
# PyTorch builds the graph *while the code runs* ("define-by-run"), so `forward` can use ordinary Python
# control flow — here the number of layers applied depends on the data — and you can inspect the graph
# mid-flight by walking `grad_fn`. A different input builds a different graph.

# %%
class DataDependentNet(nn.Module):
    """Applies its hidden layer until the activations' norm exceeds a threshold (at most 5 times)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, int]:
        steps = 0
        while inputs.norm() < 4 and steps < 5:  # ordinary Python control flow
            inputs = torch.tanh(self.hidden(inputs)) * 3
            steps += 1
        return self.out(inputs), steps


def graph_ops(tensor: torch.Tensor) -> list[str]:
    """Names of the recorded operations, walking back from `tensor`."""
    names, node = [], tensor.grad_fn
    while node is not None:
        names.append(type(node).__name__)
        parents = [n for n, _ in node.next_functions if n is not None and "Accumulate" not in type(n).__name__]
        node = parents[0] if parents else None
    return names


net = DataDependentNet()
for inputs in (torch.full((1, 4), 0.1), torch.full((1, 4), 5.0)):
    output, steps = net(inputs)
    print(f"input norm {inputs.norm():.1f}: {steps} hidden steps, graph: {graph_ops(output)}")

# %% [markdown]
# ### `nn.Module`, loss and optimizer
# A module owns parameters and defines `forward`. We first write a tiny multi-layer perceptron inline to see
# the parts; the convolutional network the chapters train is `common.SmallCNN` (three conv blocks, global
# average pooling, a linear classifier), defined once in the shared package.

# %%
class TinyMLP(nn.Module):
    def __init__(self, in_features: int, num_classes: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(in_features, 64), nn.ReLU(),
                                    nn.Linear(64, num_classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.layers(images)


mlp = TinyMLP(3 * 32 * 32, len(CLASSES))
cnn = SmallCNN(num_classes=len(CLASSES))
print(f"TinyMLP: {count_parameters(mlp):,} parameters; SmallCNN: {count_parameters(cnn):,} parameters")
print(cnn)

# %% [markdown]
# The loss compares logits with labels (cross-entropy for classification); the optimizer turns gradients into
# parameter updates. One step on one batch must lower that batch's loss:

# %%
images, labels = torch.randn(8, 3, 32, 32), torch.arange(8) % len(CLASSES)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(mlp.parameters(), lr=0.05)
before = loss_fn(mlp(images), labels)
optimizer.zero_grad()
before.backward()
optimizer.step()
after = loss_fn(mlp(images), labels)
print(f"loss before {before.item():.4f} -> after one step {after.item():.4f}")
assert after < before

# %% [markdown]
# ## §1.2 (continued) — a complete training loop on the synthetic data
# Chapter 2 builds proper `Dataset`/`DataLoader` pipelines. Here we keep the data side minimal: decode every
# image once, crop its central square and shrink it to 32×32 (`ImageOps.fit`), and keep the lot in memory as one tensor (`TensorDataset`).

# %%
def load_split(split: str, size: int = 32) -> TensorDataset:
    frame = pd.read_csv(data.labels_csv(split))
    pixels = np.stack([np.asarray(ImageOps.fit(Image.open(data.images_dir(split) / name).convert("RGB"),
                                               (size, size), Image.BILINEAR))
                       for name in tqdm(frame.file_name, desc=f"decoding {split}", leave=False)])
    images = torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255
    return TensorDataset(images, torch.tensor(frame.label.to_numpy()))


start = time.perf_counter()
train_set, val_set = load_split("train"), load_split("val")
print(f"{len(train_set)} train / {len(val_set)} val images of shape {tuple(train_set[0][0].shape)} "
      f"in {time.perf_counter() - start:.1f} s")

# %% [markdown]
# The loop itself, written out: for every batch, move it to the device, run the model, compute the loss,
# back-propagate, step. After every epoch, evaluate without gradients. `tqdm` shows progress.

# %%
train_loader = DataLoader(train_set, batch_size=32, shuffle=True, generator=generator)
val_loader = DataLoader(val_set, batch_size=128)
model = SmallCNN(num_classes=len(CLASSES)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
history = History()

for _ in tqdm(range(12), desc="epochs"):
    model.train()
    total, correct, loss_sum = 0, 0, 0.0
    for images, labels in train_loader:
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        logits = model(images)
        loss = loss_fn(logits, labels)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * len(labels)
        correct += (logits.argmax(1) == labels).sum().item()
        total += len(labels)
    history.train_loss.append(loss_sum / total)
    history.train_acc.append(correct / total)
    model.eval()
    with torch.no_grad():
        val_logits = torch.cat([model(x.to(device)).cpu() for x, _ in val_loader])
    history.val_loss.append(loss_fn(val_logits, val_set.tensors[1]).item())
    history.val_acc.append((val_logits.argmax(1) == val_set.tensors[1]).float().mean().item())

print("validation accuracy per epoch:", [round(a, 2) for a in history.val_acc])
assert max(history.val_acc) > 0.5, "the model should beat chance (1/6) by far"

# %% [markdown]
# Loss should fall and accuracy rise on both splits; a widening gap between train and validation would be
# overfitting. Validation accuracy may also *jump around* from epoch to epoch: with a high learning rate the
# weights still move a lot, and BatchNorm's running statistics (used in `eval()` mode) lag behind them.

# %%
plot_history(history, title="SmallCNN on 32×32 shapes (hand-written loop)");

# %% [markdown]
# The same loop lives in `common.training` as `train_one_epoch`, `evaluate` and `fit`, so later chapters can
# focus on the data pipeline. Three more epochs with `fit`, at a ten times smaller learning rate, settle the
# weights (and with them BatchNorm's statistics):

# %%
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
more = fit(model, train_loader, val_loader, optimizer=optimizer, num_epochs=3, device=device)
print("validation accuracy per epoch:", [round(a, 2) for a in more.val_acc])
assert more.val_acc[-1] > 0.6

# %% [markdown]
# ### Saving and loading weights
# Save the `state_dict` (a dictionary of tensors), not the pickled module: it survives code refactoring and
# loads with `weights_only=True`, which refuses arbitrary pickled objects. A fresh model with the loaded
# weights makes exactly the same predictions.

# %%
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "smallcnn.pt"
    torch.save(model.state_dict(), path)
    restored = SmallCNN(num_classes=len(CLASSES)).to(device)
    restored.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    print(f"saved {path.stat().st_size / 1024:.0f} KiB")
model.eval()
restored.eval()
probe = val_set.tensors[0][:16].to(device)
assert torch.equal(model(probe), restored(probe))
print("restored model agrees on", len(probe), "validation images")

# %% [markdown]
# Finally, a few validation predictions, so you can see what the numbers mean: the first 16 images of the
# split, each titled with the predicted class, a ✗ on a wrong one. An accuracy of 0.95 still leaves about one
# image in twenty wrong, and the errors need not spread evenly: the cell prints how many the whole split has
# and how many of them fall among the 16 shown.

# %%
with torch.no_grad():
    predicted = torch.cat([model(images.to(device)).argmax(1).cpu() for images, _ in val_loader])
wrong = (predicted != val_set.tensors[1]).nonzero().flatten().tolist()
print(f"{len(wrong)} of {len(val_set)} validation images wrong; among the 16 shown: {[i for i in wrong if i < 16]}")
titles = [f"{CLASSES[p]}{' ✗' if i in wrong else ''}" for i, p in enumerate(predicted[:16].tolist())]
show_images(list(val_set.tensors[0][:16]), titles, ncols=8);
plt.show()

# %% [markdown]
# ## Summary
# - Deep learning stacks layers whose parameters are learned from data (§1.1); the features are not hand-written.
# - Tensors carry a dtype and a device; `.to(device)` is all it takes to use a GPU, and `get_device()` picks one.
# - Autograd records operations as they run: the graph is dynamic, so Python control flow in `forward` just works (§1.2).
# - Training = forward, loss, `backward()`, `optimizer.step()`, repeated over batches and epochs; evaluate without gradients.
# - Save `state_dict`s and load them with `weights_only=True`.
#
# ## Further reading
# - [Learn the Basics](https://pytorch.org/tutorials/beginner/basics/intro.html): PyTorch's own tour of tensors, data, models, autograd and saving, one page each.
# - [A Gentle Introduction to `torch.autograd`](https://pytorch.org/tutorials/beginner/blitz/autograd_tutorial.html): how the recorded graph turns into gradients.
# - [`torch.nn` documentation](https://pytorch.org/docs/stable/nn.html): every layer and loss used here, with their shapes.
# - [Saving and Loading Models](https://pytorch.org/tutorials/beginner/saving_loading_models.html): `state_dict`, checkpoints with the optimizer, and `weights_only`.
#
# ## Exercises
# 1. Change `DataDependentNet`'s threshold and predict how the printed graph changes before running it.
# 2. Train `TinyMLP` instead of `SmallCNN` with the same loop. Which reaches higher validation accuracy, and why
#    might convolutions suit shapes at random positions?
# 3. Replace Adam with SGD (lr 0.05, momentum 0.9). Plot both histories on one figure.
# 4. Load the data at 48×48 instead of 32×32. How do accuracy and time per epoch change?
# 5. Graded versions of these exercises: `chapters/exercises/ex01_pytorch_basics.ipynb`.

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. What does `loss.backward()` compute, and where does the result go? For y = Σ x_i² at x = [1, −2, 3], what does the chapter's autograd cell print?
# 2. What does “define-by-run” mean, and how does `DataDependentNet` show it?
# 3. You make a tensor with `torch.from_numpy(array)` and then change `array[0]`. What happens to the tensor, and why?
# 4. In order, what does the chapter's hand-written training loop do for every batch, and what does it do after every epoch?
# 5. Why does the loop call `model.eval()` and use `torch.no_grad()` before it validates?
# 6. Which of the chapter's two models has more parameters, `TinyMLP` or `SmallCNN`, by about how much, and where are most of the MLP's?
# 7. Validation accuracy of the hand-written loop jumped around from epoch to epoch. What reasons does the chapter give, and what did it do about it?
# 8. Why save a model's `state_dict` rather than the pickled module, and what does `weights_only=True` add when loading?
# 9. Which device does `get_device()` choose, and what must the rest of the code do to run on a GPU?
