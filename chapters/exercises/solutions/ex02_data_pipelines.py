# %% [markdown]
# # Chapter 2 exercises — Dataset, DataLoader, transforms and custom datasets
# **Guide sections:** §2.1.1 数据管道定义 · §2.2.1 Dataset与DataLoader类 · §2.2.2 数据增强与归一化 · §2.3.1 自定义数据集的创建
# [Glossary / 术语表](../../../GLOSSARY.md)
# ## What you will learn
# - The map-style `Dataset` protocol: `__len__`, `__getitem__`, and why `IndexError` matters.
# - Writing a `Dataset` for a CSV layout nobody has written one for, with errors that name the line.
# - Computing normalization statistics without holding the dataset in memory.
# - Completing the guide's `CustomDataset.get_label` so that it agrees with torchvision's `ImageFolder`.
# - A `collate_fn` that batches images of different sizes.
#
# Five exercises, 10 points, from warm-up to challenging. They accompany `chapters/02_1_dataset_dataloader.ipynb`,
# `02_2_transforms_augmentation.ipynb` and `02_3_custom_datasets.ipynb`.

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
# `make grade-me NOTEBOOK=chapters/exercises/ex02_data_pipelines.ipynb` (or
# `python -m course.grading --self chapters/exercises/ex02_data_pipelines.ipynb`): it grades this notebook where it
# is and prints the points of each exercise with the message of each failing check
# (`build/grade-me/report/feedback/me/` holds this notebook with a message under each check cell). It runs
# your answers in a sandbox where bubblewrap works (`make system-deps` installs it), and otherwise as trusted
# work, since they are your own, and says so. The solutions and the hidden checks are kept apart, in the
# instructor version of this notebook, `chapters/exercises/solutions/ex02_data_pipelines.ipynb`: open it once you have tried.
#
# The first cell imports what the exercises use, seeds the random generators, picks the device and
# writes a tiny synthetic shapes dataset (12 training images) into a temporary folder, so that the
# checks run in seconds.

# %%
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets, transforms

from common import CustomImageDataset, SyntheticConfig, ensure_data, get_device, seed_everything
from course.student.checks import checks, hints

generator = seed_everything(0)
hint = hints("ex02_data_pipelines")  # hint("ex2", 1): the first hint of Exercise 2
device = get_device()
workdir = Path(tempfile.mkdtemp(prefix="ex02-"))
tiny = SyntheticConfig(seed=1, num_train=12, num_val=6, min_size=24, max_size=40)
data = ensure_data(workdir / "shapes", tiny, verbose=False)
print(f"device {device}; {len(pd.read_csv(data.labels_csv('train')))} tiny training images in a temporary folder")

# %% [markdown]
# ## Exercise 1 — The Dataset protocol (§2.2.1 Dataset与DataLoader类) · 1 point · ★☆☆ · ~10 min
# Write `SquaresDataset(n)`: a map-style dataset of `n` samples where sample `i` is
# `(torch.tensor([float(i)]), i * i)`. Support negative indices as a list does (`ds[-1]` is the last
# sample) and raise `IndexError` for any index outside the dataset: plain `for sample in ds` relies on it.

# %% nbgrader={"grade": false, "grade_id": "ex1-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
class SquaresDataset(Dataset):
    def __init__(self, n: int) -> None:
        ### BEGIN SOLUTION
        self.n = n
        ### END SOLUTION

    def __len__(self) -> int:
        ### BEGIN SOLUTION
        return self.n
        ### END SOLUTION

    def __getitem__(self, index: int):
        ### BEGIN SOLUTION
        if not -self.n <= index < self.n:
            raise IndexError(f"index {index} is out of range for {self.n} samples")
        index %= self.n
        return torch.tensor([float(index)]), index * index
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 1"):
    ds = SquaresDataset(10)
    assert len(ds) == 10, f"len should be 10, got {len(ds)}"
    x, y = next(iter(DataLoader(ds, batch_size=4)))
    assert x.shape == (4, 1) and y.tolist() == [0, 1, 4, 9], f"first batch: {x.tolist()}, {y.tolist()}"
    assert ds[-1][1] == 81 and ds[-1][0].item() == 9.0, "ds[-1] is the last sample"
    assert [y for _, y in ds] == [i * i for i in range(10)], "iteration must stop with IndexError after n samples"
    try:
        ds[10]
    except IndexError:
        pass
    else:
        raise AssertionError("ds[10] should raise IndexError")
### BEGIN HIDDEN TESTS
ds = SquaresDataset(5)
assert ds[-2][1] == 9 and ds[-5][0].item() == 0.0, "negative indices count from the end"
assert [y for _, y in ds] == [0, 1, 4, 9, 16], "iteration must stop with IndexError after n samples"
for bad in (5, -6, 100):
    try:
        ds[bad]
    except IndexError:
        pass
    else:
        raise AssertionError(f"ds[{bad}] should raise IndexError")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — A Dataset for a new CSV layout (§2.3.1 自定义数据集的创建) · 2 points · ★★☆ · ~25 min
# Another lab sends its annotations as a semicolon-separated file with a header `id;split;class_name`:
# the image is `<img_dir>/<id>.jpg` and the label is the position of `class_name` in `classes`.
# Write `SemicolonDataset(csv_path, img_dir, classes, *, split, transform=None)` that keeps only the
# rows of `split`, returns `(image, label)` (a PIL RGB image, or `transform(image)`), and raises a
# `ValueError` that names the CSV line (the header is line 1) for a class that is not in `classes`,
# on any row, whatever its split (a broken file should fail loudly, whichever split you read).
#
# The cell below writes such a file from the tiny dataset.

# %%
frame = pd.read_csv(data.labels_csv("train"))
layout = pd.DataFrame({"id": frame.file_name.str.removesuffix(".jpg"),
                       "split": np.where(np.arange(len(frame)) % 3 == 0, "test", "train"),
                       "class_name": [data.classes[label] for label in frame.label]})
semicolon_csv = workdir / "layout.csv"
layout.to_csv(semicolon_csv, sep=";", index=False)
print(semicolon_csv.read_text().splitlines()[:3])

# %% nbgrader={"grade": false, "grade_id": "ex2-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
class SemicolonDataset(Dataset):
    def __init__(self, csv_path, img_dir, classes, *, split, transform=None) -> None:
        ### BEGIN SOLUTION
        frame = pd.read_csv(csv_path, sep=";", dtype=str, keep_default_na=False)
        self.img_dir, self.transform = Path(img_dir), transform
        self.ids, self.labels = [], []
        for row, (sample_id, sample_split, class_name) in enumerate(frame.itertuples(index=False)):
            if class_name not in classes:
                raise ValueError(f"{csv_path} line {row + 2}: unknown class {class_name!r}")
            if sample_split == split:
                self.ids.append(sample_id)
                self.labels.append(list(classes).index(class_name))
        ### END SOLUTION

    def __len__(self) -> int:
        ### BEGIN SOLUTION
        return len(self.ids)
        ### END SOLUTION

    def __getitem__(self, index: int):
        ### BEGIN SOLUTION
        with Image.open(self.img_dir / f"{self.ids[index]}.jpg") as image:
            image = image.convert("RGB")
        if self.transform:
            image = self.transform(image)
        return image, self.labels[index]
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 2"):
    ds = SemicolonDataset(semicolon_csv, data.images_dir("train"), data.classes, split="train")
    reference = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"))
    kept = [i for i in range(len(reference)) if i % 3 != 0]
    assert len(ds) == len(kept), f"expected {len(kept)} training rows, got {len(ds)}"
    image, label = ds[0]
    ref_image, ref_label = reference[kept[0]]
    assert label == ref_label, f"label of the first training row should be {ref_label}, got {label}"
    assert np.array_equal(np.asarray(image), np.asarray(ref_image)), "the first image differs"
    assert isinstance(image, Image.Image) and image.mode == "RGB", "without a transform, a PIL RGB image"
    tensors = SemicolonDataset(semicolon_csv, data.images_dir("train"), data.classes, split="train",
                               transform=transforms.ToTensor())
    assert isinstance(tensors[0][0], torch.Tensor), "apply the transform"
    broken = layout.copy()
    broken.loc[3, "class_name"] = "pentagon"  # a test row: reading the train split must still refuse it
    broken.to_csv(workdir / "broken.csv", sep=";", index=False)
    try:
        SemicolonDataset(workdir / "broken.csv", data.images_dir("train"), data.classes, split="train")
    except ValueError as error:
        assert "line 5" in str(error), f"name the CSV line (line 5) in the error: {error}"
    else:
        raise AssertionError("an unknown class must raise ValueError, whatever the row's split")
### BEGIN HIDDEN TESTS
test_ds = SemicolonDataset(semicolon_csv, data.images_dir("train"), data.classes, split="test",
                           transform=transforms.ToTensor())
assert len(test_ds) == len(reference) - len(kept), "the test split has the other rows"
image, label = test_ds[1]
assert isinstance(image, torch.Tensor) and label == reference[3][1], "transform or label is wrong"
broken = layout.copy()
broken.loc[7, "class_name"] = "heptagon"  # a training row
broken.to_csv(workdir / "broken.csv", sep=";", index=False)
try:
    SemicolonDataset(workdir / "broken.csv", data.images_dir("train"), data.classes, split="test")
except ValueError as error:
    assert "line 9" in str(error), f"name the CSV line (line 9) in the error: {error}"
else:
    raise AssertionError("an unknown class must raise ValueError")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — Normalization statistics (§2.2.2 数据增强与归一化) · 2 points · ★★☆ · ~20 min
# `transforms.Normalize(mean, std)` needs the per-channel mean and standard deviation of the
# training images. Write `channel_stats(loader)` that computes both from a loader of
# `(images, labels)` batches (`images` of shape `(B, 3, H, W)`), one batch at a time: keep running
# sums (in float64), never the images. Return two float32 tensors of shape `(3,)`: the mean and the
# population standard deviation over all pixels of all images.

# %% nbgrader={"grade": false, "grade_id": "ex3-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def channel_stats(loader) -> tuple[torch.Tensor, torch.Tensor]:
    ### BEGIN SOLUTION
    total = torch.zeros(3, dtype=torch.float64)
    squares = torch.zeros(3, dtype=torch.float64)
    count = 0
    for images, _ in loader:
        pixels = images.to(torch.float64).transpose(0, 1).reshape(3, -1)
        total += pixels.sum(dim=1)
        squares += (pixels ** 2).sum(dim=1)
        count += pixels.shape[1]
    mean = total / count
    std = (squares / count - mean ** 2).clamp(min=0).sqrt()
    return mean.float(), std.float()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 3"):
    to_tensor = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
    ds = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"), transform=to_tensor)
    mean, std = channel_stats(DataLoader(ds, batch_size=5))  # 12 images: batches of 5, 5 and 2
    everything = torch.stack([image for image, _ in ds])
    assert mean.shape == (3,) and std.shape == (3,), "return two tensors of shape (3,)"
    assert mean.dtype == torch.float32 and std.dtype == torch.float32, "return float32 tensors"
    assert torch.allclose(mean, everything.mean(dim=(0, 2, 3)), atol=1e-5), "the mean is wrong"
    assert torch.allclose(std, everything.std(dim=(0, 2, 3), correction=0), atol=1e-5), \
        "the std is wrong (population std over all pixels)"
### BEGIN HIDDEN TESTS
torch.manual_seed(5)
batches = [(torch.rand(3, 3, 4, 5) * 7 + 2, None), (torch.rand(1, 3, 4, 5), None)]
mean, std = channel_stats(batches)
stacked = torch.cat([b for b, _ in batches])
assert torch.allclose(mean, stacked.mean(dim=(0, 2, 3)), atol=1e-5), \
    "weight every pixel equally: a short last batch counts less than a full one"
assert torch.allclose(std, stacked.std(dim=(0, 2, 3), correction=0), atol=1e-5), "wrong std"
assert mean.dtype == torch.float32 and std.dtype == torch.float32, "return float32 tensors"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — Completing the guide's `CustomDataset` (§2.3.1 自定义数据集的创建) · 2 points · ★★☆ · ~15 min
# The guide's `CustomDataset(file_list, transform)` calls `self.get_label(img_path)` but never
# writes it. Write `FolderDataset`: the classes (kept as `self.classes`) are the sorted names of the
# files' parent folders, `get_label(path)` is the index of the parent folder's name among them, and
# `__getitem__` returns `(image, label)` like the guide's. For a folder laid out as `root/<class>/<image>`, the labels must
# agree with `torchvision.datasets.ImageFolder(root)`.

# %% nbgrader={"grade": false, "grade_id": "ex4-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
class FolderDataset(Dataset):
    def __init__(self, file_list, transform=None) -> None:
        ### BEGIN SOLUTION
        self.file_list = [Path(path) for path in file_list]
        self.transform = transform
        self.classes = sorted({path.parent.name for path in self.file_list})
        self.class_to_idx = {name: index for index, name in enumerate(self.classes)}
        ### END SOLUTION

    def get_label(self, img_path) -> int:
        ### BEGIN SOLUTION
        return self.class_to_idx[Path(img_path).parent.name]
        ### END SOLUTION

    def __len__(self) -> int:
        ### BEGIN SOLUTION
        return len(self.file_list)
        ### END SOLUTION

    def __getitem__(self, index: int):
        ### BEGIN SOLUTION
        path = self.file_list[index]
        with Image.open(path) as image:
            image = image.convert("RGB")
        if self.transform:
            image = self.transform(image)
        return image, self.get_label(path)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 4"):
    folder = datasets.ImageFolder(data.imagefolder_dir("train"))
    files = [path for path, _ in folder.samples]
    ds = FolderDataset(files)
    assert len(ds) == len(folder), f"expected {len(folder)} samples, got {len(ds)}"
    labels = [ds.get_label(path) for path in files]
    assert labels == folder.targets, "labels differ from ImageFolder's"
    assert ds.classes == folder.classes, f"self.classes: the sorted folder names {folder.classes}, got {ds.classes}"
    assert ds[0][1] == folder.targets[0], "__getitem__ returns (image, label)"
    image, _ = FolderDataset(files, transform=transforms.ToTensor())[0]
    assert isinstance(image, torch.Tensor), "apply the transform, as the guide's CustomDataset does"
### BEGIN HIDDEN TESTS
two = [path for path, target in folder.samples if target in (1, 4)]
ds = FolderDataset(list(reversed(two)), transform=transforms.ToTensor())
assert ds.classes == [folder.classes[1], folder.classes[4]], "classes come from the given files only"
image, label = ds[0]
assert isinstance(image, torch.Tensor), "apply the transform"
assert label == (1 if Path(two[-1]).parent.name == folder.classes[4] else 0)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — Batching images of different sizes (§2.2.1 Dataset与DataLoader类) · 3 points · ★★★ · ~25 min
# Without a `Resize`, the default `collate_fn` cannot stack images of different sizes. Write
# `pad_collate(batch)` for a list of `(image, label)` pairs with `image` a `(C, H, W)` tensor: return
# `images` of shape `(B, C, max H, max W)` (same dtype as the inputs), each image in the top-left
# corner and zeros elsewhere; `labels` as an int64 tensor; and `sizes`, an int64 tensor `(B, 2)` of
# each original `(H, W)`.

# %% nbgrader={"grade": false, "grade_id": "ex5-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def pad_collate(batch):
    ### BEGIN SOLUTION
    images = [image for image, _ in batch]
    sizes = torch.tensor([tuple(image.shape[1:]) for image in images], dtype=torch.int64)
    height, width = sizes.max(dim=0).values.tolist()
    out = images[0].new_zeros((len(images), images[0].shape[0], height, width))
    for i, image in enumerate(images):
        out[i, :, : image.shape[1], : image.shape[2]] = image
    labels = torch.tensor([label for _, label in batch], dtype=torch.int64)
    return out, labels, sizes
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 5"):
    ds = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"),
                            transform=transforms.ToTensor())
    images, labels, sizes = next(iter(DataLoader(ds, batch_size=5, collate_fn=pad_collate)))
    originals = [ds[i][0] for i in range(5)]
    assert images.shape == (5, 3, max(o.shape[1] for o in originals), max(o.shape[2] for o in originals))
    assert images.dtype == originals[0].dtype, "keep the input dtype"
    assert labels.tolist() == [ds[i][1] for i in range(5)] and labels.dtype == torch.int64
    assert sizes.tolist() == [list(o.shape[1:]) for o in originals], "sizes are the original (H, W)"
    assert sizes.dtype == torch.int64, "sizes is an int64 tensor"
    for i, original in enumerate(originals):
        h, w = original.shape[1:]
        assert torch.equal(images[i, :, :h, :w], original), f"image {i} goes top-left, unchanged"
        rest = images[i].clone()
        rest[:, :h, :w] = 0
        assert not rest.any(), f"image {i}: zeros everywhere else"
### BEGIN HIDDEN TESTS
batch = [(torch.full((1, 2, 3), 7, dtype=torch.uint8), 0), (torch.ones(1, 4, 1, dtype=torch.uint8), 1)]
images, labels, sizes = pad_collate(batch)
assert images.dtype == torch.uint8, "keep the input dtype"
expected = torch.zeros(2, 1, 4, 3, dtype=torch.uint8)
expected[0, :, :2, :3] = 7
expected[1, :, :4, :1] = 1
assert torch.equal(images, expected), "images go top-left, zeros elsewhere"
assert sizes.tolist() == [[2, 3], [4, 1]] and sizes.dtype == torch.int64
padded, _, _ = next(iter(DataLoader(ds, batch_size=5, collate_fn=pad_collate)))
for i, original in enumerate(originals):
    h, w = original.shape[1:]
    assert torch.equal(padded[i, :, :h, :w], original), f"image {i} is not copied unchanged"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
# - A map-style dataset is `__len__` + `__getitem__`; `IndexError` ends plain iteration.
# - A new annotation layout is a small `Dataset`: parse once in `__init__`, read one file per item,
#   and fail with the CSV line in the message.
# - Normalization statistics come from running sums, one batch at a time.
# - `get_label` from the parent folder, with sorted class names, agrees with `ImageFolder`.
# - A custom `collate_fn` decides how a batch is built; padding keeps every pixel of every image.
#
# ## Exercises
# Further practice, not graded: give `pad_collate` a `multiple_of` argument (pad to a multiple of 32);
# make `SemicolonDataset` keep its index in NumPy arrays, as `common.data` does, and say why.
