# %% [markdown]
# # Chapter 3 exercises — Efficient data pipelines
# **Guide sections:** beyond the guide (it breaks off in §2.3.1); builds on §2.1.2 数据管道在深度学习中的作用
# [Glossary / 术语表](../../../GLOSSARY.md)
# ## What you will learn
# - Standardizing a channels-last uint8 batch with per-channel statistics computed over the batch.
# - Fixing an index that makes every DataLoader worker grow (copy-on-read of Python objects).
# - Writing a random transform that is safe to send to spawned workers and random in each of them.
# - Measuring how much of a training loop is spent waiting for data.
# - Caching decoded images of different sizes in one file, found through an offset index.
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
# Each exercise heading gives its points, its difficulty (★☆☆ warm-up to ★★★ challenging) and about how
# long it takes. **Stuck?** Every exercise worth more than a point has 2–3 hints, from a nudge to the near
# answer, shown one at a time: `hint("ex3", 1)` in a cell of your own prints the first hint of Exercise 3,
# `hint("ex3", 2)` the next. Grading records how many you opened; it costs no points unless your instructor
# says so.
#
# **Checking your own work.** A check cell tells you at once whether your answer holds up. To run the hidden
# checks too, save this notebook and run, at the root of the repository,
# `make grade-me NOTEBOOK=chapters/exercises/ex03_efficient_pipelines.ipynb` (or
# `python -m course.grading --self chapters/exercises/ex03_efficient_pipelines.ipynb`): it grades this notebook where it
# is and prints the points of each exercise with the message of each failing check
# (`build/grade-me/report/feedback/me/` holds this notebook with a message under each check cell). It runs
# your answers in a sandbox where bubblewrap works (`make system-deps` installs it), and otherwise as trusted
# work, since they are your own, and says so. The solutions and the hidden checks are kept apart, in the
# instructor version of this notebook, `chapters/exercises/solutions/ex03_efficient_pipelines.ipynb`: open it once you have tried.
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

from common import (
    CustomImageDataset,
    SyntheticConfig,
    ensure_data,
    get_device,
    seed_everything,
)
from course.student.checks import checks, hints

seed_everything(0)
hint = hints("ex03_efficient_pipelines")  # hint("ex2", 1): the first hint of Exercise 2
device = get_device()
workdir = Path(tempfile.mkdtemp(prefix="ex03-"))
data = ensure_data(workdir / "shapes", SyntheticConfig(seed=2, num_train=12, num_val=6, min_size=24,
                                                       max_size=40), verbose=False)
print(f"device {device}; tiny data in a temporary folder ({data.root.parent.name})")

# %% [markdown]
# ## Exercise 1 — Standardize a channels-last batch with its own statistics · 1 point · ★☆☆ · ~15 min
# The chapter normalized channels-first crops with fixed ImageNet constants. Here the batch comes
# channels-last, as decoders and memmap caches often store it, and the statistics come from the batch
# itself. Write `standardize_batch(images)`: `images` is a uint8 tensor `(B, H, W, C)` (any `C`);
# raise `ValueError` if it is not uint8 or not 4-D. Convert to float32 in [0, 1] (`/ 255`), compute
# each channel's mean and standard deviation over all `B·H·W` values of that channel
# (population std, `correction=0`), and return `(out, mean, std)`: `out` the float32 batch
# `(x - mean) / max(std, 1e-6)` laid out channels-first `(B, C, H, W)` and contiguous, `mean` and
# `std` float32 tensors of shape `(C,)` on the [0, 1] scale. Do not modify `images`.

# %% nbgrader={"grade": false, "grade_id": "ex1-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def standardize_batch(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ### BEGIN SOLUTION
    if images.dtype != torch.uint8 or images.dim() != 4:
        raise ValueError(f"expected a 4-D uint8 batch (B, H, W, C), got {images.dtype} {tuple(images.shape)}")
    x = images.to(torch.float32) / 255
    mean = x.mean(dim=(0, 1, 2))
    std = x.std(dim=(0, 1, 2), correction=0)
    out = (x - mean) / std.clamp_min(1e-6)
    return out.permute(0, 3, 1, 2).contiguous(), mean, std
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 1"):
    images = torch.randint(0, 256, (4, 6, 5, 3), dtype=torch.uint8)
    kept = images.clone()
    out, mean, std = standardize_batch(images)
    assert torch.equal(images, kept), "do not modify the uint8 batch"
    assert out.shape == (4, 3, 6, 5) and out.dtype == torch.float32, \
        f"expected float32 (4, 3, 6, 5), got {out.dtype} {tuple(out.shape)}"
    assert out.is_contiguous(), "return a contiguous channels-first batch"
    assert mean.shape == (3,) and std.shape == (3,), f"mean and std have shape (C,), got {tuple(mean.shape)}"
    assert mean.dtype == std.dtype == torch.float32, f"mean and std are float32, got {mean.dtype} {std.dtype}"
    x = kept.float() / 255
    assert torch.allclose(mean, x.mean(dim=(0, 1, 2)), atol=1e-6) and \
        torch.allclose(std, x.std(dim=(0, 1, 2), correction=0), atol=1e-6), \
        "statistics over the whole batch, on the [0, 1] scale, with correction=0"
    assert out.mean(dim=(0, 2, 3)).abs().max() < 1e-4, "each channel of the result should have mean 0"
    assert torch.allclose(out, ((x - mean) / std).permute(0, 3, 1, 2), atol=1e-5), \
        "wrong values: (x - mean) / std per channel, then (B, H, W, C) -> (B, C, H, W)"
    flat, _, _ = standardize_batch(torch.full((1, 2, 2, 1), 9, dtype=torch.uint8))
    assert flat.shape == (1, 1, 2, 2) and torch.isfinite(flat).all() and flat.abs().max() < 0.05, \
        "a constant channel gives zeros (std clamped to 1e-6), not NaN"
    try:
        standardize_batch(torch.rand(1, 2, 2, 3))
    except ValueError:
        pass
    else:
        raise AssertionError("raise ValueError for a batch that is not a 4-D uint8 tensor")
### BEGIN HIDDEN TESTS
images = torch.zeros(2, 3, 4, 2, dtype=torch.uint8)
images[0, ..., 0], images[1, ..., 0] = 0, 255  # channel 0: half the batch black, half white
images[..., 1] = torch.arange(24, dtype=torch.uint8).view(2, 3, 4) * 10
before = images.clone()
out, mean, std = standardize_batch(images)
assert torch.equal(images, before), "do not modify the uint8 batch"
assert abs(mean[0].item() - 0.5) < 1e-6 and abs(std[0].item() - 0.5) < 1e-6, \
    "statistics over the whole batch, on the [0, 1] scale, with correction=0"
x = before.float() / 255
reference_mean, reference_std = x.mean(dim=(0, 1, 2)), x.std(dim=(0, 1, 2), correction=0)
assert mean.dtype == std.dtype == torch.float32, f"mean and std are float32, got {mean.dtype} {std.dtype}"
assert torch.allclose(mean, reference_mean, atol=1e-6) and torch.allclose(std, reference_std, atol=1e-6), \
    "statistics over the whole batch, on the [0, 1] scale, with correction=0"
expected = ((x - reference_mean) / reference_std.clamp_min(1e-6)).permute(0, 3, 1, 2)
assert torch.allclose(out, expected, atol=1e-5), \
    "wrong values: per-channel statistics over B, H and W, then (B, H, W, C) -> (B, C, H, W)"
single = torch.full((1, 2, 2, 1), 7, dtype=torch.uint8)
flat, _, _ = standardize_batch(single)
# rounding may leave (x - mean) a few ulp from 0, which the 1e-6 floor keeps far below 1
assert flat.shape == (1, 1, 2, 2) and torch.isfinite(flat).all() and flat.abs().max() < 0.05, \
    "a constant channel gives zeros (std clamped to 1e-6), not NaN"
for bad in (torch.zeros(2, 2, 3, dtype=torch.uint8), torch.zeros(1, 2, 2, 3, dtype=torch.int16)):
    try:
        standardize_batch(bad)
    except ValueError:
        pass
    else:
        raise AssertionError("raise ValueError for a batch that is not a 4-D uint8 tensor")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — An index that does not grow in every worker · 2 points · ★★☆ · ~15 min
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
    assert isinstance(ds.paths, np.ndarray) and ds.paths.dtype.kind == "U", \
        "self.paths is a fixed-width NumPy string array (dtype=np.str_), not an object array"
    assert isinstance(ds.labels, np.ndarray) and ds.labels.dtype == np.int64, "self.labels is an int64 array"
    # what the arrays mean, by behaviour: a copy given other arrays serves those, whatever else it keeps
    swapped = copy.copy(ds)
    swapped.paths, swapped.labels = np.array(["a.png", "b.png"], dtype=np.str_), np.array([5, 3], dtype=np.int64)
    assert len(swapped) == 2, "len(ds) must be the length of self.labels"
    assert [swapped[0], swapped[1]] == [("a.png", 5), ("b.png", 3)], \
        "ds[i] must read self.paths[i] and self.labels[i], not a copy of the samples kept elsewhere"
### BEGIN HIDDEN TESTS
ds = CompactDataset(samples)
arrays = [value for value in vars(ds).values() if isinstance(value, np.ndarray)]
assert arrays, "keep the index in NumPy arrays"
assert all(a.dtype != object for a in arrays), \
    "an object array is still a list of Python objects: use dtype=np.str_ and np.int64"
assert [ds[i] for i in range(50)] == samples, "every sample must come back unchanged"
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
# ## Exercise 3 — A spawn-safe random transform · 2 points · ★★☆ · ~15 min
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
### BEGIN HIDDEN TESTS
small = RandomBrightness(max_delta=0.05)
for seed in range(5):
    torch.manual_seed(seed)
    assert (small(image) - image).abs().max() <= 0.05 + 1e-6, "the offset must stay within max_delta"
strong = RandomBrightness(max_delta=0.9)
for seed in range(5):
    torch.manual_seed(seed)
    shifted = strong(torch.full((1, 2, 2), 0.5))
    assert shifted.max() <= 1 and shifted.min() >= 0, "clamp to [0, 1]"
outputs = []
for seed in (7, 8):
    torch.manual_seed(seed)
    outputs.append(small(image))
assert not torch.equal(outputs[0], outputs[1]), "different torch seeds give different offsets"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — How long does the loop wait for data? · 2 points · ★★☆ · ~20 min
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

    def tail_loader(clock, batches, cost, tail):
        yield from slow_loader(clock, batches, cost)
        clock.now += tail  # the loader is slow to say it is finished

    clock = FakeClock()
    fraction = data_wait_fraction(tail_loader(clock, 2, 1.0, 4.0), step, clock=clock)
    assert abs(fraction - 6.0 / 8.0) < 1e-9, f"count the final wait too: expected 0.75, got {fraction}"
### BEGIN HIDDEN TESTS
clock = FakeClock()
fraction = data_wait_fraction(tail_loader(clock, 3, 2.0, 1.0), step, clock=clock)
assert abs(fraction - 7.0 / 10.0) < 1e-9, f"count the final wait too: expected 0.7, got {fraction}"
clock = FakeClock()
assert data_wait_fraction(slow_loader(clock, 3, 0.0), step, clock=clock) == 0.0, "no waiting"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — A cache for images of different sizes: one file and an offset index · 3 points · ★★★ · ~30 min
# The chapter's cache resized every image to one shape, so row `i` sat at a fixed place. Keep each
# image at its own size instead, and find it through an index. Write two functions.
# `build_ragged_cache(dataset, path)`: `dataset[i]` is `(PIL image, label)`; write each image's
# `np.asarray(image.convert("RGB"))` (uint8, `(H, W, 3)`), one after the other in order, as raw bytes
# into the file `path` (no header, nothing else in it), and return `(offsets, shapes, labels)`, all
# int64 NumPy arrays: `offsets` of length `N + 1`, where image `i` occupies bytes
# `offsets[i]:offsets[i + 1]` (so `offsets[0] == 0` and `offsets[-1]` is the file size), `shapes`
# of shape `(N, 3)` holding each `(H, W, 3)`, and `labels` of length `N`.
# `read_image(path, offsets, shapes, i)`: return image `i` as a read-only uint8 array `(H, W, 3)`
# read through `np.memmap(path, mode="r", ...)` (not a copy of the whole file), using the
# `offsets` and `shapes` it is given; raise `IndexError` unless `0 <= i < len(shapes)`.

# %% nbgrader={"grade": false, "grade_id": "ex5-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def build_ragged_cache(dataset, path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ### BEGIN SOLUTION
    offsets = np.zeros(len(dataset) + 1, dtype=np.int64)
    shapes = np.zeros((len(dataset), 3), dtype=np.int64)
    labels = np.zeros(len(dataset), dtype=np.int64)
    with open(path, "wb") as file:
        for index in range(len(dataset)):
            image, label = dataset[index]
            pixels = np.ascontiguousarray(np.asarray(image.convert("RGB")), dtype=np.uint8)
            file.write(pixels.tobytes())
            shapes[index] = pixels.shape
            offsets[index + 1] = offsets[index] + pixels.nbytes
            labels[index] = label
    return offsets, shapes, labels
    ### END SOLUTION


def read_image(path, offsets, shapes, i: int) -> np.ndarray:
    ### BEGIN SOLUTION
    if not 0 <= i < len(shapes):
        raise IndexError(f"image {i} is not in a cache of {len(shapes)}")
    shape = tuple(int(n) for n in shapes[i])
    return np.memmap(path, dtype=np.uint8, mode="r", offset=int(offsets[i]), shape=shape)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 5"):
    ds = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"))
    offsets, shapes, labels = build_ragged_cache(ds, workdir / "train.ragged")
    assert offsets.dtype == shapes.dtype == labels.dtype == np.int64, "return int64 arrays"
    assert offsets.shape == (len(ds) + 1,) and offsets[0] == 0, \
        f"offsets has N + 1 entries starting at 0, got shape {offsets.shape}"
    image = read_image(workdir / "train.ragged", offsets, shapes, 0)
    assert np.array_equal(image, np.asarray(ds[0][0].convert("RGB"))), "image 0 differs from the dataset's"
    assert labels.tolist() == ds.labels.tolist(), "labels differ"
    path = workdir / "train.ragged"
    originals = [np.asarray(ds[i][0].convert("RGB")) for i in range(len(ds))]
    assert path.stat().st_size == sum(a.nbytes for a in originals) == offsets[-1], \
        "the file holds the images' bytes and nothing else, and offsets[-1] is its size"
    assert shapes.tolist() == [list(a.shape) for a in originals], "shapes holds (H, W, 3) per image, in order"
    assert not read_image(path, offsets, shapes, 1).flags.writeable, "open the file read-only (mode='r')"
    try:
        read_image(path, offsets, shapes, len(ds))
    except IndexError:
        pass
    else:
        raise AssertionError(f"read_image(..., {len(ds)}) must raise IndexError")
    # read_image reads only the path and the index it is given: another file, of images the dataset does not hold
    other = workdir / "other.ragged"
    pieces = [np.arange(2 * 5 * 3, dtype=np.uint8).reshape(2, 5, 3), np.full((4, 1, 3), 9, dtype=np.uint8)]
    other.write_bytes(b"".join(p.tobytes() for p in pieces))
    index, sizes = np.array([0, 30, 42], dtype=np.int64), np.array([[2, 5, 3], [4, 1, 3]], dtype=np.int64)
    assert np.array_equal(read_image(other, index, sizes, 1), pieces[1]), \
        "read image i at offsets[i] with shape shapes[i], from the file at path"
### BEGIN HIDDEN TESTS
for i, original in enumerate(originals):
    got = read_image(path, offsets, shapes, i)
    assert got.dtype == np.uint8 and np.array_equal(got, original), f"image {i} differs: read its bytes from offsets[i], shaped shapes[i]"
assert not read_image(path, offsets, shapes, 4).flags.writeable, "open the file read-only (mode='r')"
for bad in (-1, len(ds) + 3):
    try:
        read_image(path, offsets, shapes, bad)
    except IndexError:
        pass
    else:
        raise AssertionError(f"read_image(..., {bad}) must raise IndexError")
third = workdir / "third.ragged"
parts = [np.full((1, 1, 3), 200, dtype=np.uint8), np.arange(3 * 2 * 3, dtype=np.uint8).reshape(3, 2, 3)]
third.write_bytes(b"".join(p.tobytes() for p in parts))
index, sizes = np.array([0, 3, 21], dtype=np.int64), np.array([[1, 1, 3], [3, 2, 3]], dtype=np.int64)
assert np.array_equal(read_image(third, index, sizes, 1), parts[1]), \
    "read image i at offsets[i] with shape shapes[i], from the file at path"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
# - Batch statistics: per channel over B, H and W (`correction=0`), then channels-last -> channels-first.
# - Keep a dataset's index in NumPy arrays, not Python lists, so workers do not grow.
# - Transforms for workers: small picklable classes whose randomness comes from `torch`'s generator.
# - Data-wait fraction = time blocked in `next(loader)` / total time; measure it before tuning.
# - Images of different sizes share one raw file: an offset index (N + 1 entries) and shapes find each one.
#
# ## Exercises
# Further practice, not graded: wrap the ragged cache in a `Dataset` that crops each image to a fixed
# size with `v2.RandomCrop` on uint8 tensors, and measure its images/s against `CustomImageDataset` with
# `num_workers=0`.
