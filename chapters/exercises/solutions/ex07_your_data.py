# %% [markdown]
# # Chapter 7 exercises — Your data, your cluster
# **Guide sections:** beyond the guide (it breaks off in §2.3.1); applies §2.2.1 Dataset与DataLoader类 and §2.3.1 自定义数据集的创建 to data of your own, then the title's 分布式训练 to it
# [Glossary / 术语表](../../../GLOSSARY.md)
# ## What you will learn
# - What always guessing scores on the validation split: the figure a model has to beat.
# - Turning annotations laid out your own way into the CSV flags the trainers read, with errors that name the line.
# - Choosing the number of DataLoader workers from measurements: a warm-up round, interleaved rounds, medians.
# - Debugging a resume that is refused on a copy of the same data and let through on other labels.
# - Debugging, from what the ranks print, an evaluation whose accuracy is wrong on 2 processes.
# - Launching the trainer on your data for any machine, from its GPU and core counts: processes, threads and
#   the global batch, checked against one process.
#
# Six exercises, 13 points, from warm-up to challenging. They accompany the your-data chapter (07); Exercise 5
# runs a script on 2 processes with `torchrun`, and Exercise 6 trains `common.ddp.train` on 2 processes. The
# data is tiny and synthetic (8×8 greyscale images written as PNG files, as the chapter wrote the digits), made
# in a temporary folder: nothing is downloaded.

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
# Some answers are files, not cells: the exercise names the script in `ex07_work/` (beside this notebook)
# that you fix and save; its check runs that file.
#
# Each exercise heading gives its points, its difficulty (★☆☆ warm-up to ★★★ challenging) and about how
# long it takes. **Stuck?** Every exercise worth more than a point has 2–3 hints, from a nudge to the near
# answer, shown one at a time: `hint("ex3", 1)` in a cell of your own prints the first hint of Exercise 3,
# `hint("ex3", 2)` the next. Grading records how many you opened; it costs no points unless your instructor
# says so.
#
# **Checking your own work.** A check cell tells you at once whether your answer holds up. To run the hidden
# checks too, save this notebook and run, at the root of the repository,
# `make grade-me NOTEBOOK=chapters/exercises/ex07_your_data.ipynb` (or
# `python -m course.grading --self chapters/exercises/ex07_your_data.ipynb`): it grades this notebook where it
# is and prints the points of each exercise with the message of each failing check
# (`build/grade-me/report/feedback/me/` holds this notebook with a message under each check cell). It runs
# your answers in a sandbox where bubblewrap works (`make system-deps` installs it), and otherwise as trusted
# work, since they are your own, and says so. The solutions and the hidden checks are kept apart, in the
# instructor version of this notebook, `chapters/exercises/solutions/ex07_your_data.ipynb`: open it once you have tried.
#
# The first cell imports what the exercises use, seeds the random generators, picks the device, makes a
# temporary working folder and defines `scans`, which draws the tiny images the exercises write out: each
# class has a pattern of its own, each image is its class's pattern plus noise, in the digits' grey levels 0..16.

# %%
import contextlib
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from PIL import Image
from torch.distributed.run import get_args_parser

from common import get_device, seed_everything
from common.ddp.config import parse_config
from common.ddp.launch import launch_env, rank_error, torchrun_command
from common.ddp.train import main as train_ddp
from common.device import plan_device
from common.images.digits import to_uint8, write_digits_folder
from common.images.layouts import csv_data
from common.source import show_file
from course.student.checks import checks, hints

seed_everything(0)
hint = hints("ex07_your_data")  # hint("ex2", 1): the first hint of Exercise 2
device = get_device()
workdir = Path(tempfile.mkdtemp(prefix="ex07-"))
WORK = Path("ex07_work")  # Exercise 5's scripts: evaluate.py and your answer, fixed_evaluate.py
WORK.mkdir(exist_ok=True)


def scans(counts: list[int], *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``counts[k]`` 8x8 images of class k (grey levels 0..16) and their labels, class by class."""
    patterns = np.random.default_rng(1234).random((len(counts), 8, 8)) < 0.35
    labels = np.repeat(np.arange(len(counts)), counts)
    noise = np.random.default_rng(seed).integers(0, 15, (len(labels), 8, 8))
    return np.minimum(4 * patterns[labels] + noise, 16), labels


images, labels = scans([3, 2], seed=0)
print(f"device {device}; working folder {workdir.name}; scans([3, 2]): images {images.shape}, "
      f"values {images.min()}..{images.max()}, labels {labels.tolist()}")

# %% [markdown]
# ## Exercise 1 — What guessing scores on the validation split · 1 point · ★☆☆ · ~10 min
# Chapter 7 printed what always guessing the largest class scores on the whole dataset. The figure a model
# has to beat is a guess made from the *training* split alone (all that a model ever sees), scored on the
# *validation* split; on your data the two splits' largest classes need not be the same. Write
# `guess_score(train_labels, val_labels)`: the accuracy on `val_labels` of always predicting the class that is
# most frequent in `train_labels`, a tie going to the class that sorts first. Labels are class numbers or
# class names, in a list or a NumPy array; return a `float`.

# %% nbgrader={"grade": false, "grade_id": "ex1-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def guess_score(train_labels, val_labels) -> float:
    ### BEGIN SOLUTION
    from collections import Counter

    counts = Counter(train_labels)
    largest = max(counts.values())
    guess = min(label for label, count in counts.items() if count == largest)
    return float(sum(label == guess for label in val_labels) / len(val_labels))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 1"):
    score = guess_score([0, 0, 1, 2, 0], [0, 1, 1, 2])
    assert score == 0.25, f"class 0 is the largest in training and 1 of the 4 validation labels: 0.25, got {score}"
    assert isinstance(score, float), f"return a float, got {type(score).__name__}"
    assert guess_score([12, 12, 5, 5, 0], [5, 12, 12]) == 1 / 3, \
        "classes 5 and 12 tie in training: the guess is 5, the one that sorts first"
    assert guess_score(["dog", "cat", "dog", "cat"], ["cat", "cat", "dog"]) == 2 / 3, \
        "class names: 'cat' and 'dog' tie, the guess is 'cat'"
    assert guess_score(np.array([3, 3, 4]), np.array([4, 4])) == 0.0, "NumPy arrays: the guess 3 is never right here"
### BEGIN HIDDEN TESTS
assert guess_score([1, 1, 1, 0, 0], [0, 0, 0, 1]) == 0.25, \
    "the guess comes from the training labels alone (class 1 here), however the validation labels fall"
assert guess_score(["b", "a", "c", "c", "b"], np.array(["b", "a"])) == 0.5, \
    "classes 'b' and 'c' tie in training: the guess is 'b'"
assert guess_score(np.array([7, 7, 2]), [2, 7, 7, 7]) == 0.75, "NumPy training labels, a list of validation labels"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — Your annotations as the trainers' CSV flags · 2 points · ★★★ · ~30 min
# Chapter 7 wrote its digits as an ImageFolder. Your data may come another way: the inspection images below
# lie in one folder per production line, and one file, `metadata.csv`, says for each image its finding (the
# class) and whether it belongs to the `train` or the `test` subset. The trainers read such data without
# copying a single image, through the guide's layout (§2.2.1): an annotations CSV (`file_name,label`) and
# its image folder for each split, given as `--train-csv`, `--train-images`, `--val-csv` and `--val-images`
# (`common.images.layouts.csv_data` reads them). The next cell writes the data; look at its CSV.

# %%
INSPECTION = workdir / "inspection"
FINDINGS = ("crack", "dent", "ok")
images, labels = scans([6, 5, 7], seed=1)
rows = []  # (image, line, finding, subset), in the order of metadata.csv
for place, index in enumerate(np.random.default_rng(1).permutation(len(labels))):
    image = f"line{index % 2 + 1}/part_{index:04d}.png"
    (INSPECTION / "images" / image).parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(to_uint8(images[index])).save(INSPECTION / "images" / image)
    rows.append((image, f"line{index % 2 + 1}", FINDINGS[labels[index]], "test" if place % 4 == 3 else "train"))
with (INSPECTION / "metadata.csv").open("w", newline="") as file:
    csv.writer(file).writerows([("image", "line", "finding", "subset"), *rows])
print(*(INSPECTION / "metadata.csv").read_text().splitlines()[:6], "...", sep="\n")

# %% [markdown]
# Write `trainer_flags(metadata, images, out)`. `metadata` is a CSV whose header line names its columns: among
# them `image` (a path relative to the folder `images`), `finding` (the class name) and `subset` (`train` or
# `test`); other columns, and the order of the columns, do not matter. It writes two annotations files into
# the folder `out` (created if need be) and returns the flags for them:
#
# - `out/train.csv` and `out/val.csv` (the `test` subset is the trainers' validation split), each with the
#   header `file_name,label` and one line per image of its split, in the order of `metadata`: the `image`
#   path as given, and its finding as the label;
# - the result is the eight arguments
#   `["--train-csv", ..., "--train-images", ..., "--val-csv", ..., "--val-images", ...]`, each value a
#   path as a string (both image folders are `images`).
#
# Bad input is refused before anything is written, with a `ValueError` whose message names the metadata file
# and the line (its header is line 1), as Chapter 2's CSV errors do: `metadata.csv line 7: ...`. Refuse a
# missing column (name it), a subset other than `train` or `test`, an image that is not a file in `images`
# (name it), an image listed on an earlier line already (name both lines: a test image that is also a
# training image inflates the accuracy), and a test image whose finding no training image has.

# %% nbgrader={"grade": false, "grade_id": "ex2-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def trainer_flags(metadata, images, out) -> list[str]:
    ### BEGIN SOLUTION
    metadata, images, out = Path(metadata), Path(images), Path(out)
    where, first_line, splits = metadata.name, {}, {"train": [], "val": []}
    with metadata.open(newline="") as file:
        reader = csv.DictReader(file)
        missing = [name for name in ("image", "finding", "subset") if name not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{where} line 1: no column {', '.join(missing)}")
        for line, row in enumerate(reader, start=2):
            image, finding, subset = row["image"], row["finding"], row["subset"]
            if subset not in ("train", "test"):
                raise ValueError(f"{where} line {line}: subset {subset!r} is neither 'train' nor 'test'")
            if not (images / image).is_file():
                raise ValueError(f"{where} line {line}: image {image!r} is not a file in {images}")
            if image in first_line:
                raise ValueError(f"{where} line {line}: image {image!r} is on line {first_line[image]} already")
            first_line[image] = line
            splits["train" if subset == "train" else "val"].append((line, image, finding))
    trained = {finding for _, _, finding in splits["train"]}
    for line, image, finding in splits["val"]:
        if finding not in trained:
            raise ValueError(f"{where} line {line}: no training image has the finding {finding!r} of {image!r}")
    out.mkdir(parents=True, exist_ok=True)
    flags = []
    for split, chosen in splits.items():
        with (out / f"{split}.csv").open("w", newline="") as file:
            csv.writer(file).writerows([("file_name", "label"), *((image, finding) for _, image, finding in chosen)])
        flags += [f"--{split}-csv", str(out / f"{split}.csv"), f"--{split}-images", str(images)]
    return flags
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
shutil.rmtree(workdir / "metadata", ignore_errors=True)  # nothing left from an earlier run of this cell
LINES = (INSPECTION / "metadata.csv").read_text().splitlines()  # LINES[0] is line 1, the header


def metadata_with(name: str, changes: dict[int, str]) -> Path:
    """metadata.csv with the lines ``changes`` names (1 is the header) replaced, in a folder of its own."""
    path = workdir / "metadata" / name / "metadata.csv"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(changes.get(number, text) for number, text in enumerate(LINES, start=1)) + "\n")
    return path


def refusal(metadata: Path) -> str:
    """The message of the ValueError trainer_flags raises for ``metadata``, which must write nothing."""
    out = metadata.parent / "out"
    try:
        trainer_flags(metadata, INSPECTION / "images", out)
    except ValueError as error:
        assert not out.exists() or not any(out.iterdir()), f"{metadata.parent.name}: write nothing for bad input"
        return str(error)
    raise AssertionError(f"{metadata.parent.name}: bad input must raise a ValueError")


def names_line(message: str, *numbers: int) -> bool:
    return "metadata.csv" in message and all(re.search(rf"\bline {n}\b", message) for n in numbers)


with checks("Exercise 2"):
    flags = trainer_flags(INSPECTION / "metadata.csv", INSPECTION / "images", workdir / "flags")
    assert flags[::2] == ["--train-csv", "--train-images", "--val-csv", "--val-images"], f"the flags: {flags}"
    data = csv_data(*(Path(value) for value in flags[1::2]))
    assert data.classes == FINDINGS, f"classes {data.classes}: write each image's finding as its label"
    for split, subset in (("train", "train"), ("val", "test")):
        dataset = data.dataset(split)
        got = [(dataset.path(i).relative_to((INSPECTION / "images").resolve()).as_posix(),
                data.classes[dataset.labels[i]]) for i in range(len(dataset))]
        want = [(image, finding) for image, _, finding, chosen in rows if chosen == subset]
        assert got == want, f"the {split} split holds the {subset} images with their findings, in the metadata's order"
    message = refusal(metadata_with("missing-image", {5: LINES[4].replace(rows[3][0], "line1/part_9999.png")}))
    assert names_line(message, 5) and "part_9999.png" in message, \
        f"an image that does not exist, on line 5: name the file, the line and the image; got {message!r}"
    assert all(isinstance(value, str) for value in flags), "each flag and value is a string"
    assert flags[3] == flags[7] == str(INSPECTION / "images"), "both image folders are `images`"
    test_line = next(number for number, row in enumerate(rows, start=2) if row[3] == "test")
    message = refusal(metadata_with("bad-subset", {8: LINES[7].rsplit(",", 1)[0] + ",tset"}))
    assert names_line(message, 8), f"subset 'tset' on line 8: name the file and the line; got {message!r}"
    image3, line3, finding3, _ = rows[1]  # line 3
    message = refusal(metadata_with("listed-twice", {test_line: f"{image3},{line3},{finding3},test"}))
    assert names_line(message, test_line, 3), \
        f"line {test_line} lists the training image of line 3 as a test image: name both lines; got {message!r}"
    image, line, _, _ = rows[test_line - 2]
    message = refusal(metadata_with("unseen-finding", {test_line: f"{image},{line},scratch,test"}))
    assert names_line(message, test_line), \
        f"line {test_line}: no training image has the finding 'scratch': name the line; got {message!r}"
    message = refusal(metadata_with("no-finding-column", {1: "image,line,class,subset"}))
    assert "metadata.csv" in message and "finding" in message, f"a missing column: name it; got {message!r}"
    shuffled = workdir / "metadata" / "other-columns" / "metadata.csv"
    shuffled.parent.mkdir(parents=True)
    with shuffled.open("w", newline="") as file:
        csv.writer(file).writerows([("subset", "notes", "finding", "image"),
                                    *((subset, "", finding, image) for image, _, finding, subset in rows)])
    again = trainer_flags(shuffled, INSPECTION / "images", shuffled.parent / "out")
    for split in (1, 5):
        assert Path(again[split]).read_text() == Path(flags[split]).read_text(), \
            "the same annotations with other columns, in another order, give the same files"
### BEGIN HIDDEN TESTS
message = refusal(metadata_with("bad-subset-2", {6: LINES[5].rsplit(",", 1)[0] + ",validation"}))
assert names_line(message, 6), f"subset 'validation' on line 6: name the file and the line; got {message!r}"
trains = [number for number, row in enumerate(rows, start=2) if row[3] == "train"]
first, later = trains[0], trains[-1]
image, line, finding, _ = rows[first - 2]
message = refusal(metadata_with("listed-twice-2", {later: f"{image},{line},{finding},train"}))
assert names_line(message, later, first), \
    f"line {later} lists the image of line {first} again: name both lines; got {message!r}"
image, line, _, _ = rows[test_line - 2]
message = refusal(metadata_with("unseen-finding-2", {test_line: f"{image},{line},rust,test"}))
assert names_line(message, test_line), f"line {test_line}: no training image has the finding 'rust'; got {message!r}"
message = refusal(metadata_with("no-subset-column", {1: "image,line,finding,part"}))
assert "metadata.csv" in message and "subset" in message, f"a missing column: name it; got {message!r}"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — How many workers: decide from measurements · 2 points · ★★☆ · ~20 min
# Chapter 7 timed each loader in turn, for several rounds, after a first round that only starts the workers
# and warms the page cache, and compared medians; its decision list says to stop adding workers where the
# speed stops growing. Put that into a function you can point at your own loader:
# `choose_workers(measure, candidates, *, rounds, tolerance=0.1)`, where `measure(num_workers)` times one
# epoch of your loader with that many workers and returns images/s.
#
# 1. A warm-up round first: `measure(w)` once for each candidate `w`, in the order given; these results are
#    thrown away.
# 2. Then `rounds` rounds, each measuring every candidate once, in the order given (round after round, as the
#    chapter does, so that a busy moment of the machine falls on all settings alike and not on one).
# 3. For each candidate, the median of its `rounds` results (for an even number, the mean of the two middle
#    ones, as `statistics.median` and `np.median` give): one slow round must not decide.
# 4. The choice: the fewest workers whose median is at least `(1 - tolerance)` times the best median (more
#    workers take cores the training needs).
#
# Return `(choice, medians)`, `medians` a dict `{num_workers: median}`. A `rounds` below 1 raises
# `ValueError` before anything is measured.

# %% nbgrader={"grade": false, "grade_id": "ex3-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def choose_workers(measure, candidates, *, rounds: int, tolerance: float = 0.1) -> tuple[int, dict]:
    ### BEGIN SOLUTION
    import statistics

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    speeds = {workers: [] for workers in candidates}
    for round_number in range(rounds + 1):  # round 0 starts the workers and warms the page cache
        for workers in candidates:
            speed = measure(workers)
            if round_number:
                speeds[workers].append(speed)
    medians = {workers: statistics.median(found) for workers, found in speeds.items()}
    best = max(medians.values())
    return min(w for w, median in medians.items() if median >= (1 - tolerance) * best), medians
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
class Loaders:
    """A stand-in for timing a loader: each call to ``measure(w)`` returns the next speed listed for w."""

    def __init__(self, speeds: dict[int, list[float]]) -> None:
        self.speeds = {workers: list(found) for workers, found in speeds.items()}
        self.calls = []

    def measure(self, num_workers: int) -> float:
        self.calls.append(num_workers)
        return self.speeds[num_workers].pop(0)


with checks("Exercise 3"):
    loaders = Loaders({0: [20, 100, 100, 100], 1: [30, 180, 170, 175], 2: [40, 190, 185, 195]})
    choice, medians = choose_workers(loaders.measure, [0, 1, 2], rounds=3)
    assert loaders.calls == [0, 1, 2] * 4, f"a warm-up round, then 3 rounds over 0, 1, 2 in turn; calls {loaders.calls}"
    assert medians == {0: 100, 1: 175, 2: 190}, f"the medians of the 3 rounds after the warm-up: {medians}"
    assert choice == 1, f"1 worker's 175 images/s is within 10% of the best 190: choose 1, not {choice}"
    loaders = Loaders({2: [5, 300, 100], 0: [5, 50, 60], 1: [5, 100, 310]})
    choice, medians = choose_workers(loaders.measure, [2, 0, 1], rounds=2, tolerance=0.05)
    assert loaders.calls == [2, 0, 1] * 3, f"the candidates in the order given, round after round: {loaders.calls}"
    assert medians == {2: 200, 0: 55, 1: 205}, f"the median of an even count is the mean of the middle two: {medians}"
    assert choice == 1, f"1 and 2 workers are within 5% of the best: choose the fewest, 1, not {choice}"
    loaders = Loaders({0: [1]})
    try:
        choose_workers(loaders.measure, [0], rounds=0)
    except ValueError:
        assert loaders.calls == [], "rounds=0 must raise before measuring anything"
    else:
        raise AssertionError("rounds=0 must raise ValueError")
### BEGIN HIDDEN TESTS
loaders = Loaders({0: [20, 100, 100, 100], 1: [30, 180, 20, 178], 2: [40, 190, 185, 195]})
choice, medians = choose_workers(loaders.measure, [0, 1, 2], rounds=3)
assert medians[1] == 178 and choice == 1, \
    f"1 worker had one slow round (20): its median is still 178, within 10% of 190; got {medians}, choice {choice}"
loaders = Loaders({0: [1, 80], 3: [1, 81]})
assert choose_workers(loaders.measure, [0, 3], rounds=1, tolerance=0.0) == (3, {0: 80, 3: 81}), \
    "tolerance 0: only the best median qualifies"
loaders = Loaders({0: [1]})
try:
    choose_workers(loaders.measure, [0], rounds=-1)
except ValueError:
    assert loaders.calls == [], "rounds=-1 must raise before measuring anything"
else:
    raise AssertionError("rounds=-1 must raise ValueError")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — Debug a resume refused on a copy of the same data · 2 points · ★★☆ · ~20 min
# Chapter 7's trainers record what their data is in every snapshot and refuse to resume on other data. Your
# team's trainer does the same with `recorded_identity` below: it saves `recorded_identity(root)` beside
# every snapshot, and on a restart `may_resume` compares it with `recorded_identity(root)` of the data the
# job is given now. Two reports came in:
#
# 1. The data was copied to the cluster's scratch disk (same folders, same images, a new place), and every
#    resume there is refused.
# 2. A mislabelled image was moved to its right class folder in `train/`, and the resume went through: the
#    job went on training the checkpoint on other labels than the ones it was trained on, without a word.
#
# The next cell holds the two functions; the one after it reproduces both reports.

# %%
def recorded_identity(root) -> dict[str, str]:
    """What a snapshot records of its data, an ImageFolder root: the classes, and a digest of each split."""
    root = Path(root)
    identity = {"classes": ", ".join(sorted(path.name for path in (root / "train").iterdir() if path.is_dir()))}
    for split in ("train", "val"):
        files = sorted((path.name, path.stat().st_mtime_ns) for path in (root / split).rglob("*.png"))
        identity[split] = hashlib.sha256(repr(files).encode()).hexdigest()
    return identity


def may_resume(saved: dict[str, str], now: dict[str, str]) -> str | None:
    """None where a resume may go on; else what changed."""
    changed = [name for name in saved if saved[name] != now.get(name)]
    return f"refused: {', '.join(changed)} changed" if changed else None

# %%
shutil.rmtree(workdir / "reports", ignore_errors=True)  # a fresh start
PARTS = workdir / "reports" / "parts"
write_digits_folder(*scans([6, 6, 6], seed=2), PARTS, val_fraction=0.25, seed=0, classes=FINDINGS)
saved = recorded_identity(PARTS)
scratch = shutil.copytree(PARTS, workdir / "reports" / "scratch" / "parts", copy_function=shutil.copy)  # as `cp -r`
print("1. on the scratch disk:", may_resume(saved, recorded_identity(scratch)))
moved = sorted((PARTS / "train" / "dent").glob("*.png"))[0]
moved.rename(PARTS / "train" / "ok" / moved.name)
print(f"2. after moving train/dent/{moved.name} to train/ok/:", may_resume(saved, recorded_identity(PARTS)))

# %% [markdown]
# Write `data_identity(root)`: `recorded_identity` fixed, so that both reports are answered, with the same
# keys (`classes`, `train`, `val`), each value a string. A resume must go on where the data is the same
# images in the same classes of the same splits, and be refused (a value changes) as soon as an image is
# added, removed, or in another class or split than before. Reading the images' bytes is not needed (on a
# real dataset it would take as long as an epoch). The hidden checks copy, move and rename in other ways.

# %% nbgrader={"grade": false, "grade_id": "ex4-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def data_identity(root) -> dict[str, str]:
    """What a snapshot records of its data, an ImageFolder root: the classes, and a digest of each split."""
    ### BEGIN SOLUTION
    root = Path(root)
    identity = {"classes": ", ".join(sorted(path.name for path in (root / "train").iterdir() if path.is_dir()))}
    for split in ("train", "val"):
        # which image in which class: paths inside the split, in sorted order (not the listing's)
        files = sorted(path.relative_to(root / split).as_posix() for path in (root / split).rglob("*.png"))
        identity[split] = hashlib.sha256("\n".join(files).encode()).hexdigest()
    return identity
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def parts_folder(root: Path) -> Path:
    write_digits_folder(*scans([5, 4, 6], seed=5), root, val_fraction=0.25, seed=1, classes=FINDINGS)
    return root


shutil.rmtree(workdir / "ex4", ignore_errors=True)  # nothing left from an earlier run of this cell
with checks("Exercise 4"):
    here = parts_folder(workdir / "ex4" / "parts")
    saved = data_identity(here)
    assert sorted(saved) == ["classes", "train", "val"], f"keep the keys classes, train and val: {sorted(saved)}"
    copied = shutil.copytree(here, workdir / "ex4" / "scratch" / "parts", copy_function=shutil.copy)
    assert data_identity(copied) == saved, \
        f"a copy of the same data in another place must resume, but: {may_resume(saved, data_identity(copied))}"
    moved = sorted((here / "train" / "dent").glob("*.png"))[0]
    moved.rename(here / "train" / "ok" / moved.name)
    now = data_identity(here)
    assert now["train"] != saved["train"], "an image moved to another class of train/ must change train's digest"
    assert now["val"] == saved["val"] and now["classes"] == saved["classes"], "val/ and the classes did not change"
    assert all(isinstance(value, str) for value in now.values()), "each value is a string"
    other = parts_folder(workdir / "ex4" / "split")
    before = data_identity(other)
    back = sorted((other / "val" / "crack").glob("*.png"))[0]
    back.rename(other / "train" / "crack" / back.name)
    after = data_identity(other)
    assert after["train"] != before["train"] and after["val"] != before["val"], \
        "an image moved from val/ to train/ changes both digests"
    (other / "train" / "crack" / back.name).unlink()
    assert data_identity(other)["train"] != after["train"], "an image removed from train/ changes its digest"
    shutil.copy(sorted((other / "val" / "ok").glob("*.png"))[0], other / "val" / "ok" / "added.png")
    assert data_identity(other)["val"] != after["val"], "an image added to val/ changes its digest"
### BEGIN HIDDEN TESTS
elsewhere = workdir / "ex4" / "other-disk" / "renamed"
for path in sorted(here.rglob("*.png"), reverse=True):  # another folder name, another order of creation
    target = elsewhere / path.relative_to(here)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, target)
assert data_identity(elsewhere) == now, "the same data under another folder name, its files written in another order"
os.utime(next(here.rglob("*.png")), ns=(10**18, 10**18))
assert data_identity(here) == now, "a file's new modification time changes no image, class or split"
back = sorted((here / "val" / "crack").glob("*.png"))[0]
back.rename(here / "train" / "crack" / back.name)
after = data_identity(here)
assert after["train"] != now["train"] and after["val"] != now["val"], \
    "an image moved from val/ to train/ changes both digests"
(here / "train" / "crack" / back.name).unlink()
assert data_identity(here)["train"] != after["train"], "an image removed from train/ changes its digest"
for split in ("train", "val"):
    (here / split / "ok").rename(here / split / "good")
renamed = data_identity(here)
assert renamed["classes"] == "crack, dent, good" and renamed["val"] != after["val"], \
    "a class renamed in both splits changes the classes and the digests"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — Debug an evaluation that is wrong on 2 processes · 3 points · ★★★ · ~30 min
# A model was trained on the inspection data of another plant, laid out as an ImageFolder; its validation
# split has no image of the rare class `crack`. `fit_model` below stands in for the training (a
# nearest-class-mean classifier, saved as an `nn.Linear` state dict: one output per class of `train/`, in
# sorted order) and says how well it does on the training split.

# %%
def pixels(path: Path) -> torch.Tensor:
    """An image file as the evaluation reads it: its grey values, flattened, 0..1."""
    with Image.open(path) as image:
        return torch.from_numpy(np.asarray(image.convert("L"), dtype=np.float32).reshape(-1) / 255)


def plant_folder(root: Path, counts: list[int], *, seed: int, classes: tuple[str, ...]) -> Path:
    """An ImageFolder of scans whose val/ lacks the classes' first (a rare class: no validation image)."""
    shutil.rmtree(root, ignore_errors=True)
    write_digits_folder(*scans(counts, seed=seed), root, val_fraction=0.25, seed=seed, classes=classes)
    shutil.rmtree(root / "val" / classes[0])
    return root


def fit_model(root: Path, out: Path) -> float:
    """Save a classifier of root/train/'s images to ``out``; its accuracy on them."""
    classes = sorted(path.name for path in (root / "train").iterdir() if path.is_dir())
    files = [sorted((root / "train" / name).glob("*.png")) for name in classes]
    means = torch.stack([torch.stack([pixels(path) for path in paths]).mean(0) for paths in files])
    model = {"weight": means, "bias": -0.5 * (means**2).sum(1)}  # the largest output: the nearest class mean
    torch.save(model, out)
    right = [int((model["weight"] @ pixels(path) + model["bias"]).argmax()) == label
             for label, paths in enumerate(files) for path in paths]
    return sum(right) / len(right)


PLANT = plant_folder(workdir / "plant", [8, 12, 16], seed=3, classes=FINDINGS)
MODEL = workdir / "plant-model.pt"
print(f"training accuracy {fit_model(PLANT, MODEL):.3f}; val/ holds",
      {path.name: len(list(path.iterdir())) for path in sorted((PLANT / "val").iterdir())})

# %% [markdown]
# The script below evaluates the saved model on the validation split, on any number of processes, and its
# author expected an accuracy close to the training accuracy. It is the file `ex07_work/evaluate.py` beside
# this notebook; the next cell shows it, and the one after `run_evaluation` runs it on 2 processes with `torchrun` (about 15 s on a 2-core laptop). Read what the
# ranks print: how many images they count, against how many files `val/` holds, and the accuracy. Then find
# out in the script why.

# %% tags=["demo"]
show_file(WORK / "evaluate.py")

# %% [markdown]
# `run_evaluation` starts a script like that under `torchrun --standalone` on `ranks` processes, with
# `--data` and `--model`, and returns what the ranks printed.

# %%
def run_evaluation(script: Path, root: Path, model: Path, ranks: int = 2) -> str:
    """``script --data root --model model`` on ``ranks`` processes under torchrun; what the ranks printed."""
    if "NotImplementedError" in script.read_text():
        raise NotImplementedError(f"{script.name} still raises NotImplementedError")
    command = torchrun_command(str(script), ["--data", str(root), "--model", str(model)], nproc_per_node=ranks)
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=launch_env(threads=1),
                          check=False)
    assert done.returncode == 0, f"{script.name} failed:\n{done.stderr[-1500:]}"
    return done.stdout

# %% tags=["demo"]
print(run_evaluation(WORK / "evaluate.py", PLANT, MODEL))

# %% [markdown]
# Your answer is a file: `ex07_work/fixed_evaluate.py`, handed out as a copy of the script whose first line
# raises `NotImplementedError`. Delete that line and fix the script so that, on any number of processes, it
# counts every validation image exactly once and scores the model against the labels it was trained with; the
# check below runs it on 2 processes, on another plant's data (about 15 s). Keep the printed lines and the
# arguments. Chapters 4.2 and 7 show every tool it takes; the hidden checks compare the counts and the
# accuracy with the model's own, image by image. Stuck? `hint("ex5", 1)` in a cell of your own, then
# `hint("ex5", 2)` and `hint("ex5", 3)`.

# %% nbgrader={"grade": false, "grade_id": "ex5-answer", "locked": true, "schema_version": 3, "solution": false, "task": false} tags=["answer-file:ex07_work/fixed_evaluate.py:ex07_work/evaluate.py"]
# Exercise 5's answer is the file ex07_work/fixed_evaluate.py, not this cell: fix the script there and save it.
# (Grading takes that file from beside your notebook.)

# %% nbgrader={"grade": true, "grade_id": "ex5-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
OTHER = plant_folder(workdir / "other-plant", [10, 12, 14, 14], seed=4, classes=("bent", "chip", "good", "scratch"))
OTHER_MODEL = workdir / "other-plant-model.pt"
trained = fit_model(OTHER, OTHER_MODEL)
files = sorted((OTHER / "val").rglob("*.png"))
with checks("Exercise 5"):
    printed = run_evaluation(WORK / "fixed_evaluate.py", OTHER, OTHER_MODEL)
    found = re.findall(r"val: (\d+) images, (\d+) correct, accuracy [\d.]+", printed)
    assert len(found) == 1, f"expected one line 'val: ...' from rank 0, got:\n{printed}"
    seen, correct = map(int, found[0])
    assert seen == len(files), f"{seen} images counted, {len(files)} in val/: count every image exactly once"
    assert correct / seen > 0.8, (f"accuracy {correct / seen:.3f}, where the model scores {trained:.3f} on the "
                                  "training split: are the images scored against the labels it learned?")
### BEGIN HIDDEN TESTS
classes = sorted(path.name for path in (OTHER / "train").iterdir())
state = torch.load(OTHER_MODEL, weights_only=True)
right = sum(int((state["weight"] @ pixels(path) + state["bias"]).argmax()) == classes.index(path.parent.name)
            for path in files)
assert correct == right, f"{correct} correct: image by image, the model gets {right} of {len(files)} right"
shares = sorted(int(n) for n in re.findall(r"rank \d+: (\d+) images", printed))
assert shares == [5, 6], f"each of the 2 ranks evaluates its own share of the 11 images (5 and 6), got {shares}"
assert f"classes: {', '.join(classes)}; model outputs: 4" in printed, \
    f"keep the line 'classes: ...; model outputs: ...', with the model's classes:\n{printed}"
assert "destroy_process_group" in (WORK / "fixed_evaluate.py").read_text(), "leave the process group"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 — Launch the training of your data on any machine · 3 points · ★★★ · ~30 min
# Chapter 7 trained its digits with `common.ddp.train` under `torchrun` on this machine's 2 cores, and
# Chapter 4.2 showed the command for a machine with 8 GPUs. The inspection data of Exercise 2 is to be
# trained on machines you know only by their counts: a workstation with 4 GPUs and 64 cores, a laptop with
# one GPU, a cloud machine without any. Write the launch once, for all of them. The next cell writes the
# annotations files of Exercise 2 (`train.csv`, and `val.csv` for the `test` subset) without your
# `trainer_flags`, and sets `RUN_FLAGS`: their eight flags, then the run's settings. These are a tiny
# SmallCNN for two epochs, no augmentation, and GroupNorm: it keeps no batch statistics, so a batch split
# over ranks computes what the whole batch computes in one process (Chapter 4.2).

# %%
EX6 = workdir / "ex6"
shutil.rmtree(EX6, ignore_errors=True)  # a fresh start
(EX6 / "annotations").mkdir(parents=True)
DATA_FLAGS = []  # what trainer_flags returns for the inspection data
for split, subset in (("train", "train"), ("val", "test")):
    with (EX6 / "annotations" / f"{split}.csv").open("w", newline="") as file:
        csv.writer(file).writerows([("file_name", "label"),
                                    *((image, finding) for image, _, finding, chosen in rows if chosen == subset)])
    DATA_FLAGS += [f"--{split}-csv", str(EX6 / "annotations" / f"{split}.csv"),
                   f"--{split}-images", str(INSPECTION / "images")]
SETTINGS = ["--no-augment", "--image-size", "16", "--width", "4", "--norm", "group",
            "--optimizer", "sgd", "--lr", "0.05", "--num-epochs", "2"]
RUN_FLAGS = [*DATA_FLAGS, *SETTINGS]
print(" ".join(RUN_FLAGS).replace(str(workdir), "WORK"))

# %% [markdown]
# Write `launch_training(run_flags, out, *, batch_size, gpus, cores)`. It returns `(command, env)`: the command
# line (a list of strings, for `subprocess`) that trains `common.ddp.train` with `run_flags`, as they are, on
# a machine with `gpus` GPUs and `cores` CPU cores, and the environment variables to set for it (a dict of
# strings; the command inherits the rest). Build the command with `torchrun_command`, as Chapters 4 and 7 do.
# On every machine:
#
# - **Every GPU trains, each rank on a GPU of its own with NCCL**: Chapter 4.1's device plan decides from the
#   counts what a rank gets. On a machine without a GPU every core trains instead, one process per core.
# - **The cores are shared out**: each process gets `cores // processes` math threads (at least one), given
#   both as `OMP_NUM_THREADS` in `env` and as the trainer's `--threads`.
# - **The same training, whatever the machine**: each optimizer step learns from `batch_size` images, and the
#   weights at the end are those of a run on one process with that batch. `python -m common.ddp.train --help`
#   says what each of the trainer's flags means.
# - The run writes its log to `out/log.jsonl` (`--log-file`) and its final weights to `out/final.pt`
#   (`--save-final`).
#
# The check runs your launch for a machine without a GPU and with 2 cores (this one, any GPU of it hidden; about 20 s on a 2-core laptop)
# and reads the log: the ranks, their device and backend, and each epoch's validation count (the 4 images of
# the `test` subset, each counted once). It then compares the final weights with the same run on one process
# in this kernel. The hidden checks describe other machines; their commands are read, not run.

# %% nbgrader={"grade": false, "grade_id": "ex6-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def launch_training(run_flags, out, *, batch_size, gpus, cores) -> tuple[list[str], dict[str, str]]:
    ### BEGIN SOLUTION
    processes = gpus if gpus > 0 else cores  # the device plan gives every rank a GPU only if none is shared
    threads = max(1, cores // processes)
    out = Path(out)
    args = [*run_flags, "--batch-size", str(batch_size),  # the global batch: the trainer splits it over the ranks
            "--threads", str(threads), "--log-file", str(out / "log.jsonl"), "--save-final", str(out / "final.pt")]
    return torchrun_command("common.ddp.train", args, nproc_per_node=processes), {"OMP_NUM_THREADS": str(threads)}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex6-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def read_launch(command) -> tuple[int, object]:
    """The processes a launch starts, and the settings (a TrainConfig) common.ddp.train reads from it."""
    assert isinstance(command, list) and all(isinstance(part, str) for part in command), \
        f"the command is a list of strings, got {command!r}"
    assert command[:2] == [sys.executable, "-m"] and command[2:3] in (["common.ddp.torchrun"],
                                                                      ["torch.distributed.run"]), \
        f"build the command with torchrun_command (torchrun, run by this interpreter), got {command[:3]}"
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            launcher = get_args_parser().parse_args(command[3:])
            config = parse_config(launcher.training_script_args)
    except SystemExit:
        raise AssertionError(f"the command does not parse: {said.getvalue().strip()[-600:]}") from None
    trains = (launcher.training_script == "common.ddp.train" if launcher.module
              else Path(launcher.training_script).resolve() == Path(sys.modules["common.ddp.train"].__file__).resolve())
    assert trains and not launcher.no_python, f"the command must train common.ddp.train, got {command[3:]}"
    assert launcher.nproc_per_node.isdigit() and int(launcher.nproc_per_node) > 0, \
        f"a number of processes, got --nproc-per-node={launcher.nproc_per_node}"
    return int(launcher.nproc_per_node), config


def run_launch(command: list[str], env, out: Path) -> list[dict]:
    """Run a launch with this machine's GPUs hidden; the records of its log."""
    assert isinstance(env, dict) and all(isinstance(key, str) and isinstance(value, str) for key, value in env.items()), \
        f"env is a dict of strings, got {env!r}"
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False,
                          env={**launch_env(threads=1), **env, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, f"the launch failed: {rank_error(done.stderr or done.stdout)}"
    assert (out / "log.jsonl").is_file(), "the run wrote no log to out/log.jsonl"
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def trained_alone(run_flags: list[str], batch_size: int, out: Path) -> tuple[dict, list[dict]]:
    """The same run on one process, in this kernel, on the CPU: its final weights and log records."""
    threads, said = torch.get_num_threads(), io.StringIO()
    try:
        with (mock.patch.dict(os.environ, {"COMPANION_DEVICE": "cpu"}), contextlib.redirect_stdout(said),
              contextlib.redirect_stderr(said)):
            status = train_ddp([*run_flags, "--batch-size", str(batch_size), "--threads", "1",
                                "--log-file", str(out / "log.jsonl"), "--save-final", str(out / "final.pt")])
    finally:
        torch.set_num_threads(threads)  # the trainer set one thread for this kernel
    assert status == 0, f"the run on one process failed:\n{said.getvalue()[-1500:]}"
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return torch.load(out / "final.pt", weights_only=True), records


def events(records: list[dict], event: str) -> list[dict]:
    return [record for record in records if record["event"] == event]


shutil.rmtree(EX6 / "runs", ignore_errors=True)  # nothing left from an earlier run of this cell: logs are appended to
with checks("Exercise 6"):
    two_cores = EX6 / "runs" / "two-cores"
    command, env = launch_training(RUN_FLAGS, two_cores, batch_size=4, gpus=0, cores=2)
    processes, config = read_launch(command)
    assert processes == 2, f"a machine without a GPU and with 2 cores: one process per core, 2, got {processes}"
    assert isinstance(env, dict) and env.get("OMP_NUM_THREADS") == "1" and config.threads == 1, \
        (f"2 processes on 2 cores: one thread each, as OMP_NUM_THREADS and --threads; "
         f"got {env.get('OMP_NUM_THREADS') if isinstance(env, dict) else env!r} and {config.threads}")
    shutil.rmtree(two_cores, ignore_errors=True)  # only what this run writes
    records = run_launch(command, env, two_cores)
    (start,) = events(records, "start")
    plan = (start["world_size"], start["backend"], start["device"])
    assert plan == (2, "gloo", "cpu"), f"2 ranks on the CPU with gloo, got world size, backend, device {plan}"
    counts = [record["val_count"] for record in events(records, "epoch")]
    assert counts == [4, 4], \
        f"each of the 2 epochs validates on the 4 images of the test subset, each once; validation counts {counts}"
    alone, alone_records = trained_alone(RUN_FLAGS, 4, EX6 / "runs" / "one-process")
    weights = torch.load(two_cores / "final.pt", weights_only=True)
    steps = (events(records, "done")[0]["step"], events(alone_records, "done")[0]["step"])
    for name, value in alone.items():
        assert name in weights and weights[name].shape == value.shape and \
            torch.allclose(weights[name], value, rtol=1.3e-6, atol=1e-5), \
            (f"after 2 processes, {name} is not what one process with batch_size=4 gives ({steps[0]} optimizer steps "
             f"on 2 processes, {steps[1]} on one): each step must learn from the same images")
    command, env = launch_training(RUN_FLAGS, EX6 / "runs" / "workstation", batch_size=64, gpus=4, cores=64)
    processes, config = read_launch(command)  # read, not run: this machine has no 4 GPUs
    assert processes == 4, f"a workstation with 4 GPUs: every GPU trains, one process each; got {processes}"
    assert env.get("OMP_NUM_THREADS") == "16" and config.threads == 16, \
        f"4 processes on 64 cores: 16 threads each; got {env.get('OMP_NUM_THREADS')} and {config.threads}"
    assert config.batch_size == 64, f"--batch-size is the global batch, as given: got {config.batch_size}"
### BEGIN HIDDEN TESTS
def settings(config) -> dict:
    """A TrainConfig's settings, the output files as paths."""
    found = vars(config).copy()
    for name in ("log_file", "save_final"):
        found[name] = Path(found[name]) if found[name] else None
    return found


for gpus, cores, batch_size in ((2, 32, 32), (1, 8, 8), (0, 1, 4), (8, 4, 16), (3, 64, 12), (0, 6, 12)):
    there = EX6 / "runs" / f"{gpus}-gpus-{cores}-cores"
    command, env = launch_training(RUN_FLAGS, there, batch_size=batch_size, gpus=gpus, cores=cores)
    processes, config = read_launch(command)
    plan = plan_device(rank=0, local_rank=0, local_world_size=processes, world_size=processes, cuda_count=gpus,
                       mps=False, forced=None, in_group=True)
    assert not gpus or plan.backend == "nccl", \
        f"a machine with {gpus} GPU(s) and {cores} core(s): {processes} processes, and the device plan says: {plan.reason}"
    assert not gpus or processes == gpus, \
        f"a machine with {gpus} GPU(s) and {cores} core(s): every GPU trains, one process each; got {processes} processes"
    assert gpus or processes == cores, \
        f"a machine with no GPU and {cores} core(s): every core trains, one process each; got {processes} processes"
    threads = max(1, cores // processes)
    assert isinstance(env, dict) and env.get("OMP_NUM_THREADS") == str(threads) and config.threads == threads, \
        (f"a machine with {gpus} GPU(s) and {cores} core(s): {processes} processes share the cores, {threads} thread(s) each; "
         f"got OMP_NUM_THREADS {env.get('OMP_NUM_THREADS') if isinstance(env, dict) else env!r} "
         f"and --threads {config.threads}")
    assert all(isinstance(value, str) for value in env.values()), "the environment's values are strings"
    wanted = settings(parse_config([*RUN_FLAGS, "--batch-size", str(batch_size), "--threads", str(threads),
                                    "--log-file", str(there / "log.jsonl"), "--save-final", str(there / "final.pt")]))
    changed = sorted(name for name, value in settings(config).items() if value != wanted[name])
    assert not changed, (f"a machine with {gpus} GPU(s) and {cores} core(s): the trainer's settings {changed} differ from the "
                         f"run's (run_flags as they are, the global batch of {batch_size} images, the log and the "
                         "weights in out)")
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
# - A model must beat the guess made from the training split alone, scored on the validation split.
# - Annotations of your own layout become the guide's CSV flags without copying an image; bad rows are
#   refused before anything is written, with the file and line named.
# - Choose the number of workers from medians of interleaved rounds after a warm-up, and stop where the
#   speed stops growing.
# - A data identity names which images are in which class and split, not where the folder is or when the
#   files were written: a copy resumes, a relabelling is refused.
# - Evaluation on several ranks needs the training split's classes and an exact-once split of the
#   images: no padding and no dropped last batch.
# - A launch follows from the machine's counts: one process per GPU (the device plan's condition for NCCL),
#   else one per core; the cores shared out as threads (`OMP_NUM_THREADS` and `--threads`); `--batch-size`
#   stays the global batch, so 2 ranks train what one process trains.
#
# ## Exercises
# Further practice, not graded: add `--snapshot` and `--max-steps 3` to the launch of Exercise 6 (it stops
# after the first epoch), then resume it on one process without `--max-steps`: does the resume go on, and are
# the final weights those of the uninterrupted run? Then copy the data elsewhere and resume again. And point
# `choose_workers` at your own loader, with `common.fast.timing.time_epochs` inside `measure`.
