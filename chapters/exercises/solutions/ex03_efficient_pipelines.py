# %% [markdown]
# # Chapter 3 exercises — Efficient data pipelines
# **Guide sections:** beyond the guide (it breaks off in §2.3.1); builds on §2.1.2 数据管道在深度学习中的作用
# [Glossary / 术语表](../../../GLOSSARY.md)
# ## What you will learn
# - Normalizing whole uint8 batches at once, with the same result as per-image `ToTensor` + `Normalize`.
# - Fixing an index that makes every DataLoader worker grow (copy-on-read of Python objects).
# - Writing a random transform that is safe to send to spawned workers and random in each of them.
# - Measuring how much of a training loop is spent waiting for data.
# - Decoding and resizing once into a uint8 memory-mapped cache.
#
# Five exercises, 10 points, from warm-up to challenging. They accompany the efficient-pipelines chapter (03).

# %% [markdown]
# ## How these exercises work
# Write your code in the cells that say `# YOUR CODE HERE` (replace the `raise NotImplementedError()`
# or the `...`), run that cell, then run the check cell below it. A check cell prints
# "not yet done" until you have answered, and fails with a message when something is wrong.
# When your work is graded, each check cell runs again together with hidden checks, and only the
# answer cells of your notebook are used: keep all of an exercise's code in its answer cell.
# Your answers then run in a process of their own, and the checks see only what your functions
# return and what they do to their arguments: return plain values (numbers, strings, tensors,
# arrays, lists of them), not objects of a class of your own that stand in for them.
#
# **Checking your own work.** A check cell tells you at once whether your answer holds up. To run
# the hidden checks too, save this notebook, copy it into a folder of your own with one sub-folder
# per person (`mywork/me/`) and run `make grade SUBMISSIONS=mywork` at the root of the repository:
# `build/grades/grades.csv` holds your points, and `build/grades/feedback/me/` this notebook with a
# message under each check cell. `make grade` runs the answers in a sandbox (bubblewrap, installed by
# `make system-deps`); without one, `make grade SUBMISSIONS=mywork GRADE_FLAGS=--trusted` runs your
# own code as it is. The solutions and the hidden checks are kept apart, in the instructor version of
# this notebook, `chapters/exercises/solutions/ex03_efficient_pipelines.ipynb`: open it once you have tried.
#
# The first cell imports what the exercises use, seeds the random generators, picks the device and
# writes a tiny synthetic shapes dataset (12 training images) into a temporary folder, so that the
# checks run in seconds.

# %%
import copy
import pickle
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision.transforms import v2

from common import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CustomImageDataset,
    SyntheticConfig,
    ensure_data,
    get_device,
    seed_everything,
)
from course.assignments import checks

seed_everything(0)
device = get_device()
workdir = Path(tempfile.mkdtemp(prefix="ex03-"))
data = ensure_data(workdir / "shapes", SyntheticConfig(seed=2, num_train=12, num_val=6, min_size=24,
                                                       max_size=40), verbose=False)
print(f"device {device}; tiny data in a temporary folder ({data.root.parent.name})")

# %% [markdown]
# ## Exercise 1 — Normalize a whole batch · 1 point
# Write `normalize_batch(images, mean, std)`: `images` is a uint8 tensor `(B, 3, H, W)`; return
# float32 `(images / 255 - mean) / std` per channel, for all images at once (broadcasting), without
# modifying `images`. It must match `ToDtype(float32, scale=True)` + `Normalize(mean, std)` per image.

# %% nbgrader={"grade": false, "grade_id": "ex1-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def normalize_batch(images: torch.Tensor, mean, std) -> torch.Tensor:
    ### BEGIN SOLUTION
    mean = torch.as_tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.as_tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return (images.to(torch.float32) / 255 - mean) / std
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 1"):
    images = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    out = normalize_batch(images, IMAGENET_MEAN, IMAGENET_STD)
    per_image = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    expected = torch.stack([per_image(image) for image in images])
    assert out.shape == images.shape and out.dtype == torch.float32, f"got {out.dtype}, {tuple(out.shape)}"
    assert torch.allclose(out, expected, atol=1e-5), "values differ from ToDtype + Normalize"
### BEGIN HIDDEN TESTS
images = torch.randint(0, 256, (1, 3, 2, 5), dtype=torch.uint8)
before = images.clone()
out = normalize_batch(images, (0.5, 0.25, 0.0), (0.5, 0.5, 1.0))
assert torch.equal(images, before), "do not modify the uint8 batch"
expected = (images.float() / 255 - torch.tensor([0.5, 0.25, 0.0]).view(1, 3, 1, 1)) / \
    torch.tensor([0.5, 0.5, 1.0]).view(1, 3, 1, 1)
assert torch.allclose(out, expected, atol=1e-6), "wrong values for another mean/std"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — An index that does not grow in every worker · 2 points
# A dataset that keeps its samples as a Python list of `(path, label)` tuples makes every DataLoader
# worker slowly copy that list: reading a Python object writes its reference count, and the
# copy-on-write pages are duplicated per worker. Write `CompactDataset(samples)` that keeps the
# index in two NumPy arrays, `self.paths` (a fixed-width `np.str_` array) and `self.labels`
# (`int64`), and nothing else of length N; `len(ds)` and `ds[i]` read those two arrays, and `ds[i]`
# returns `(path, label)` as `(str, int)`.

# %% nbgrader={"grade": false, "grade_id": "ex2-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
class CompactDataset(Dataset):
    def __init__(self, samples) -> None:
        ### BEGIN SOLUTION
        self.paths = np.array([str(path) for path, _ in samples], dtype=np.str_)
        self.labels = np.array([label for _, label in samples], dtype=np.int64)
        ### END SOLUTION

    def __len__(self) -> int:
        ### BEGIN SOLUTION
        return len(self.labels)
        ### END SOLUTION

    def __getitem__(self, index: int) -> tuple[str, int]:
        ### BEGIN SOLUTION
        return str(self.paths[index]), int(self.labels[index])
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def python_containers(ds, n):
    """Attributes that are Python lists, tuples or dicts with n or more items."""
    return [name for name, value in vars(ds).items()
            if isinstance(value, list | tuple | dict) and len(value) >= n]


with checks("Exercise 2"):
    samples = [(f"images/img_{i:05d}.jpg", i % 6) for i in range(50)]
    ds = CompactDataset(samples)
    assert len(ds) == 50 and ds[7] == samples[7], f"ds[7] should be {samples[7]}, got {ds[7]}"
    assert type(ds[7][0]) is str and type(ds[7][1]) is int, "return a str and an int"
    assert not python_containers(ds, 50), f"Python containers of samples: {python_containers(ds, 50)}"
### BEGIN HIDDEN TESTS
ds = CompactDataset(samples)
arrays = [value for value in vars(ds).values() if isinstance(value, np.ndarray)]
assert arrays, "keep the index in NumPy arrays"
assert all(a.dtype != object for a in arrays), \
    "an object array is still a list of Python objects: use dtype=np.str_ and np.int64"
assert [ds[i] for i in range(50)] == samples, "every sample must come back unchanged"
# what the arrays mean, by behaviour: a copy given other arrays serves those, whatever else it keeps
rng = np.random.default_rng(3)
other_paths = np.array([f"other/{rng.integers(10**6):06d}.png" for _ in range(37)], dtype=np.str_)
other_labels = rng.integers(0, 9, 37).astype(np.int64)
swapped = copy.copy(ds)
swapped.paths, swapped.labels = other_paths, other_labels
assert len(swapped) == 37, "len(ds) must be the length of self.labels"
wanted = [(str(p), int(y)) for p, y in zip(other_paths, other_labels, strict=True)]
assert [swapped[i] for i in range(37)] == wanted, \
    "ds[i] must read self.paths[i] and self.labels[i], not a copy of the samples kept elsewhere"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — A spawn-safe random transform · 2 points
# With the `spawn` start method (macOS and Windows default) each worker receives a pickled copy of
# the dataset and its transforms, so a transform must be picklable (a class with plain attributes,
# no lambdas), and its randomness must come from `torch`'s global generator, which the DataLoader
# seeds differently in every worker. (A generator stored in the transform is copied, and every
# worker then produces the same "random" augmentations.)
# Complete `RandomBrightness(*, max_delta)`: a callable class with a keyword-only argument; called on a
# float image tensor in [0, 1], it adds one random offset drawn uniformly from
# `[-max_delta, max_delta]` with `torch.rand`, and clamps the result to [0, 1].

# %% nbgrader={"grade": false, "grade_id": "ex3-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
class RandomBrightness:
    def __init__(self, *, max_delta: float) -> None:
        ### BEGIN SOLUTION
        self.max_delta = max_delta
        ### END SOLUTION

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        delta = (torch.rand(()) * 2 - 1) * self.max_delta
        return (image + delta).clamp(0, 1)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 3"):
    transform = RandomBrightness(max_delta=0.2)
    image = torch.full((3, 4, 4), 0.5)
    torch.manual_seed(0)
    first = transform(image)
    torch.manual_seed(0)
    again = pickle.loads(pickle.dumps(transform))(image)
    assert torch.equal(first, again), "a pickled copy with the same torch seed gives the same result"
    assert (first - image).abs().max() <= 0.2 + 1e-6, "the offset must stay within max_delta"
### BEGIN HIDDEN TESTS
transform = RandomBrightness(max_delta=0.2)
try:
    RandomBrightness(0.2)
except TypeError:
    pass
else:
    raise AssertionError("max_delta must be keyword-only")
workers = [copy.deepcopy(pickle.loads(pickle.dumps(transform))) for _ in range(2)]
outputs = []
for worker_id, worker in enumerate(workers):
    torch.manual_seed(1000 + worker_id)  # what DataLoader does in each worker
    outputs.append(worker(image))
assert not torch.equal(outputs[0], outputs[1]), \
    "two workers with different torch seeds must differ: draw with torch.rand, not a stored generator"
assert transform(torch.ones(3, 2, 2)).max() <= 1 and transform(torch.zeros(3, 2, 2)).min() >= 0, \
    "clamp to [0, 1]"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — How long does the loop wait for data? · 2 points
# Write `data_wait_fraction(loader, step, *, clock=time.perf_counter)`: iterate over `loader`, call
# `step(batch)` for every batch, and return the fraction of the total time spent waiting for the next
# batch (inside `next(...)` on the loader's iterator, including the final wait that ends the loop).
# Read the time only through `clock()` so that the check can use a fake clock.

# %% nbgrader={"grade": false, "grade_id": "ex4-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def data_wait_fraction(loader, step, *, clock=time.perf_counter) -> float:
    ### BEGIN SOLUTION
    waiting = 0.0
    start = clock()
    iterator = iter(loader)
    while True:
        before = clock()
        try:
            batch = next(iterator)
        except StopIteration:
            waiting += clock() - before
            break
        waiting += clock() - before
        step(batch)
    total = clock() - start
    return waiting / total if total > 0 else 0.0
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def slow_loader(clock, batches, cost):
    for batch in range(batches):
        clock.now += cost  # producing a batch takes `cost` seconds
        yield batch


with checks("Exercise 4"):
    clock = FakeClock()

    def step(batch):
        clock.now += 1.0

    fraction = data_wait_fraction(slow_loader(clock, 4, 3.0), step, clock=clock)
    assert abs(fraction - 0.75) < 1e-9, f"3 s waiting and 1 s computing per batch is 0.75, got {fraction}"
### BEGIN HIDDEN TESTS
clock = FakeClock()


def tail_loader(clock):
    yield from slow_loader(clock, 2, 1.0)
    clock.now += 4.0  # the loader is slow to say it is finished


fraction = data_wait_fraction(tail_loader(clock), step, clock=clock)
assert abs(fraction - 6.0 / 8.0) < 1e-9, f"count the final wait too: expected 0.75, got {fraction}"
clock = FakeClock()
assert data_wait_fraction(slow_loader(clock, 3, 0.0), step, clock=clock) == 0.0, "no waiting"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — Decode once: a uint8 memory-mapped cache · 3 points
# Decoding JPEGs every epoch is often the slowest stage. Write `build_cache(dataset, path, *, size)`:
# `dataset[i]` is `(PIL image, label)`; resize each image once with `image.resize((size, size))`,
# write all of them into a raw `np.memmap` file at `path` of shape `(N, size, size, 3)` and dtype
# uint8 (no header), then return `(cache, labels)`: the cache reopened read-only (`mode="r"`) and
# the labels as an int64 NumPy array.

# %% nbgrader={"grade": false, "grade_id": "ex5-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def build_cache(dataset, path, *, size: int) -> tuple[np.ndarray, np.ndarray]:
    ### BEGIN SOLUTION
    shape = (len(dataset), size, size, 3)
    cache = np.memmap(path, dtype=np.uint8, mode="w+", shape=shape)
    labels = np.empty(len(dataset), dtype=np.int64)
    for index in range(len(dataset)):
        image, label = dataset[index]
        cache[index] = np.asarray(image.convert("RGB").resize((size, size)))
        labels[index] = label
    cache.flush()
    del cache
    return np.memmap(path, dtype=np.uint8, mode="r", shape=shape), labels
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 5"):
    ds = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"))
    cache, labels = build_cache(ds, workdir / "train_16.u8", size=16)
    assert cache.shape == (len(ds), 16, 16, 3) and cache.dtype == np.uint8, f"got {cache.shape} {cache.dtype}"
    assert np.array_equal(cache[3], np.asarray(ds[3][0].resize((16, 16)))), "image 3 differs from PIL's resize"
    assert labels.dtype == np.int64 and labels.tolist() == ds.labels.tolist(), "labels differ"
### BEGIN HIDDEN TESTS
cache, labels = build_cache(ds, workdir / "train_16.u8", size=16)
assert (workdir / "train_16.u8").stat().st_size == len(ds) * 16 * 16 * 3, "a raw file, no header"
assert not cache.flags.writeable, "return the cache opened read-only (mode='r')"
reopened = np.memmap(workdir / "train_16.u8", dtype=np.uint8, mode="r", shape=cache.shape)
for i in range(len(ds)):
    assert np.array_equal(reopened[i], np.asarray(ds[i][0].resize((16, 16)))), f"image {i} on disk differs"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
# - Normalize uint8 batches in one broadcast operation, after the cheap uint8 steps.
# - Keep a dataset's index in NumPy arrays, not Python lists, so workers do not grow.
# - Transforms for workers: small picklable classes whose randomness comes from `torch`'s generator.
# - Data-wait fraction = time blocked in `next(loader)` / total time; measure it before tuning.
# - Decode and resize once into a uint8 memmap; augment cheaply from there every epoch.
#
# ## Exercises
# Further practice, not graded: wrap the cache in a `Dataset` that applies `v2` augmentations to uint8
# tensors, and measure its images/s against `CustomImageDataset` with `num_workers=0`.
