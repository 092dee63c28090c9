# %% [markdown]
# # Chapter 5 exercises — Sharded, streaming datasets
# **Guide sections:** beyond the guide (it breaks off in §2.3.1); builds on §2.1.2 数据管道在深度学习中的作用
# [Glossary / 术语表](../../../GLOSSARY.md)
# ## What you will learn
# - Splitting shards across ranks and DataLoader workers so that every shard is read exactly once.
# - Writing tar shards in the WebDataset convention cut by a byte budget, byte for byte reproducibly.
# - Reading shards safely: no path traversal, no links.
# - A shuffle buffer built to stated guarantees (bounded, exactly once, seeded), and equal sample counts per rank so that DDP never waits forever.
# - Debugging a `torchrun` job that reads some samples twice, from the counts it prints.
#
# Seven exercises, 12 points, from warm-up to challenging (the last two start processes). They accompany the sharded-datasets chapter (05).

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
# Some answers are files, not cells: the exercise names the script in `ex05_work/` (beside this notebook)
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
# `make grade-me NOTEBOOK=chapters/exercises/ex05_sharded_data.ipynb` (or
# `python -m course.grading --self chapters/exercises/ex05_sharded_data.ipynb`): it grades this notebook where it
# is and prints the points of each exercise with the message of each failing check
# (`build/grade-me/report/feedback/me/` holds this notebook with a message under each check cell). It runs
# your answers in a sandbox where bubblewrap works (`make system-deps` installs it), and otherwise as trusted
# work, since they are your own, and says so. The solutions and the hidden checks are kept apart, in the
# instructor version of this notebook, `chapters/exercises/solutions/ex05_sharded_data.ipynb`: open it once you have tried.
#
# The first cell imports what the exercises use, seeds the random generators, picks the device,
# makes a temporary working folder and 23 tiny fake samples `(key, bytes, label)` to write into shards.

# %%
import io
import re
import tarfile
import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from common import (
    CustomImageDataset,
    V2EvalPreset,
    ensure_data,
    get_device,
    seed_everything,
)
from common.shards import ShardedImageDataset, ensure_shards, read_manifest
from common.source import show_file
from common.synthetic import SyntheticConfig
from course.student.checks import checks, hints

seed_everything(0)
hint = hints("ex05_sharded_data")  # hint("ex2", 1): the first hint of Exercise 2
device = get_device()
workdir = Path(tempfile.mkdtemp(prefix="ex05-"))
WORK = Path("ex05_work")  # Exercise 7's scripts: shard_reader.py and your answer, fixed_reader.py
WORK.mkdir(exist_ok=True)
samples = [(f"img_{i:05d}", bytes([i % 256]) * (10 + i), i % 6) for i in range(23)]
print(f"device {device}; {len(samples)} tiny samples (key, bytes, label); temporary working folder {workdir.name}")

# %% [markdown]
# ## Exercise 1 — Every shard exactly once · 1 point · ★☆☆ · ~10 min
# With `world_size` ranks and `num_workers` DataLoader workers per rank there are
# `world_size * max(num_workers, 1)` consumers (`num_workers=0` means the main process reads, as one
# worker with id 0). Write `shards_for(shards, *, rank, world_size, worker_id, num_workers)`: consumer
# number `rank * max(num_workers, 1) + worker_id` takes every consumer-count-th shard starting at its
# number, so that all consumers together read each shard exactly once. (This is a different, equally valid
# scheme from the chapter's `ShardedImageDataset`, which first splits shards by rank and then each rank's
# share by worker: follow the numbering described here.)

# %% nbgrader={"grade": false, "grade_id": "ex1-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def shards_for(shards: list, *, rank: int, world_size: int, worker_id: int, num_workers: int) -> list:
    ### BEGIN SOLUTION
    per_rank = max(num_workers, 1)
    return list(shards[rank * per_rank + worker_id::world_size * per_rank])
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
def all_consumers(shards, world_size, num_workers):
    return [shards_for(shards, rank=r, world_size=world_size, worker_id=w, num_workers=num_workers)
            for r in range(world_size) for w in range(max(num_workers, 1))]


with checks("Exercise 1"):
    shards = [f"shard-{i:05d}.tar" for i in range(7)]
    parts = all_consumers(shards, world_size=2, num_workers=2)
    assert sorted(s for part in parts for s in part) == shards, f"not exactly once: {parts}"
    assert shards_for(shards, rank=1, world_size=2, worker_id=0, num_workers=2) == ["shard-00002.tar",
                                                                                    "shard-00006.tar"]
    assert shards_for(shards, rank=1, world_size=2, worker_id=0, num_workers=0) == shards[1::2], \
        "num_workers=0: the main process reads, as the one worker with id 0 of its rank"
### BEGIN HIDDEN TESTS
for world_size in (1, 2, 3):
    for num_workers in (0, 1, 2):
        parts = all_consumers(list(range(10)), world_size, num_workers)
        assert sorted(i for part in parts for i in part) == list(range(10)), \
            f"world_size={world_size}, num_workers={num_workers}: {parts}"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — Shards cut by a byte budget · 2 points · ★★★ · ~30 min
# The chapter cuts shards by sample count, so when images differ in size, so do the shards; storage
# and readers prefer shards of about equal bytes. Write `write_shards(samples, out_dir, *, max_bytes)`
# for a list of `(key, jpeg_bytes, label)` samples that cuts shards by size instead:
#
# - **Which sample goes where.** Samples keep their order, and each one is in exactly one shard. A
#   sample's size is `len(jpeg_bytes)` (labels and tar headers do not count). A shard takes samples
#   while their sizes add up to at most `max_bytes`: it closes just before the sample that would push
#   its total over `max_bytes`, and that sample starts the next shard. A sample larger than
#   `max_bytes` is not refused: it gets a shard of its own. No shard is empty.
# - **Files.** Shard `k` (from 0) is `out_dir/shard-{k:05d}.tar` (create `out_dir`, parents too, if it
#   does not exist), holding for each of its samples, in order, `<key>.jpg` (the bytes) and then
#   `<key>.cls` (the label as ASCII digits). The same input must give byte-identical files: every
#   member has `mtime`, `uid` and `gid` 0 and `mode` `0o644`, in the default `tarfile` format.
# - **Result.** The shard paths (`pathlib.Path`), in order; `[]` for no samples.
# - **Errors.** A `max_bytes` below 1 raises `ValueError`, before anything is written.

# %% nbgrader={"grade": false, "grade_id": "ex2-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def write_shards(samples, out_dir, *, max_bytes: int) -> list[Path]:
    ### BEGIN SOLUTION
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
    groups, total = [], 0
    for sample in samples:
        size = len(sample[1])
        if groups and total + size <= max_bytes:
            groups[-1].append(sample)
            total += size
        else:  # the first sample, or one that would push the open shard over the budget
            groups.append([sample])
            total = size
    out_dir = Path(out_dir)
    if groups:
        out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, group in enumerate(groups):
        path = out_dir / f"shard-{k:05d}.tar"
        with tarfile.open(path, "w") as tar:
            for key, data, label in group:
                for name, payload in ((f"{key}.jpg", data), (f"{key}.cls", str(label).encode())):
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime, info.uid, info.gid, info.mode = len(payload), 0, 0, 0, 0o644
                    tar.addfile(info, io.BytesIO(payload))
        paths.append(path)
    return paths
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def members(path):
    """The (name, bytes) of every member of a shard, in order."""
    with tarfile.open(path) as tar:
        return [(member.name, tar.extractfile(member).read()) for member in tar.getmembers()]


def keys_of(paths):
    """The keys of every shard, shard by shard (from the .jpg members)."""
    return [[name.removesuffix(".jpg") for name, _ in members(path) if name.endswith(".jpg")] for path in paths]


# samples[i] has 10 + i bytes: samples 0-4 add up to 10 + 11 + 12 + 13 + 14 = 60 bytes
with checks("Exercise 2"):
    paths = write_shards(samples, workdir / "by-bytes" / "shards", max_bytes=60)
    assert [p.name for p in paths[:2]] == ["shard-00000.tar", "shard-00001.tar"], f"shard names: {paths[:2]}"
    assert members(paths[0])[:2] == [("img_00000.jpg", samples[0][1]), ("img_00000.cls", b"0")], \
        "a shard holds <key>.jpg (the bytes), then <key>.cls (the label as ASCII digits), per sample"
    groups = keys_of(paths)
    assert groups[0] == [f"img_{i:05d}" for i in range(5)], \
        f"samples 0-4 are 60 bytes, exactly max_bytes=60: shard 0 holds all five, got {groups[0]}"
    assert groups[1] == [f"img_{i:05d}" for i in range(5, 8)], \
        f"shard 1 closes before img_00008, which would make it 66 bytes: got {groups[1]}"
    assert [key for group in groups for key in group] == [key for key, _, _ in samples], \
        "every sample exactly once, in order (is the last shard written?)"
    mixed = [(f"m{i}", b"x" * size, i) for i, size in enumerate([30, 5, 5, 30, 4, 4, 4])]
    assert keys_of(write_shards(mixed, workdir / "mixed", max_bytes=12)) == [["m0"], ["m1", "m2"], ["m3"], ["m4", "m5", "m6"]], \
        "sizes 30, 5, 5, 30, 4, 4, 4 with max_bytes=12: each 30-byte sample gets a shard of its own, no shard is empty"
    again = write_shards(samples, workdir / "by-bytes-again", max_bytes=60)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths], "output must be byte-identical"
    with tarfile.open(paths[-1]) as tar:
        assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.mode == 0o644 for m in tar.getmembers()), \
            "every member needs mtime, uid, gid 0 and mode 0o644"
    assert write_shards([], workdir / "no-samples", max_bytes=10) == [], "no samples give no shards"
    try:
        write_shards(samples, workdir / "refused", max_bytes=0)
    except ValueError:
        assert not list((workdir / "refused").glob("*.tar")), "max_bytes=0 must raise before writing a shard"
    else:
        raise AssertionError("max_bytes=0 must raise ValueError")
### BEGIN HIDDEN TESTS
assert [len(group) for group in groups] == [5, 3, 3, 2, 2, 2, 2, 2, 1, 1], \
    f"samples per shard with max_bytes=60: {[len(group) for group in groups]}"
odd = [(f"o{i}", b"y" * size, i) for i, size in enumerate([3, 9, 1, 1, 1, 20, 2])]
assert keys_of(write_shards(odd, workdir / "odd" / "deeper", max_bytes=10)) == [["o0"], ["o1", "o2"], ["o3", "o4"], ["o5"], ["o6"]], \
    "sizes 3, 9, 1, 1, 1, 20, 2 with max_bytes=10: a shard closes just before the sample that would pass max_bytes"
try:
    write_shards(samples, workdir / "refused-again", max_bytes=-5)
except ValueError:
    assert not (workdir / "refused-again").exists() or not list((workdir / "refused-again").glob("*.tar"))
else:
    raise AssertionError("max_bytes=-5 must raise ValueError")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — Reading a shard safely · 2 points · ★★☆ · ~20 min
# Shards come from elsewhere: a member could be named `../../etc/passwd`, be absolute, or be a link.
# Write `read_shard(path)` that yields `(key, jpeg_bytes, label)`, with `label` an `int`, for each
# `<key>.jpg` / `<key>.cls` pair (in order), and raises `ValueError` naming the shard and the member for any member that is not
# a regular file or whose name contains `/`, `\` or `..` or starts with `/`. Do not extract anything to
# disk: read members with `extractfile`.

# %% nbgrader={"grade": false, "grade_id": "ex3-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def read_shard(path):
    ### BEGIN SOLUTION
    pending = {}
    with tarfile.open(path) as tar:
        for member in tar:
            name = member.name
            if not member.isfile() or "/" in name or "\\" in name or ".." in name:
                raise ValueError(f"{path}: unsafe member {name!r}")
            key, _, extension = name.rpartition(".")
            pending.setdefault(key, {})[extension] = tar.extractfile(member).read()
            if {"jpg", "cls"} <= set(pending[key]):
                parts = pending.pop(key)
                yield key, parts["jpg"], int(parts["cls"].decode())
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def shard_with(members, path):
    """A tar file from (name, bytes or None for a symbolic link) pairs."""
    with tarfile.open(path, "w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            if payload is None:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    return path


def refuses(path):
    try:
        list(read_shard(path))
    except ValueError as error:
        return str(path) in str(error)
    return False


with checks("Exercise 3"):
    shard = shard_with([(f"{key}.{ext}", payload) for key, data, label in samples[:4]
                        for ext, payload in (("jpg", data), ("cls", str(label).encode()))],
                       workdir / "small.tar")
    assert list(read_shard(shard)) == [(k, d, y) for k, d, y in samples[:4]], "samples differ"
    bad = shard_with([("../evil.jpg", b"x"), ("../evil.cls", b"0")], workdir / "traversal.tar")
    assert refuses(bad), "a member named ../evil.jpg must raise ValueError naming the shard"
    assert refuses(shard_with([("a.jpg", None), ("a.cls", b"1")], workdir / "link.tar")), "links are refused"
    assert refuses(shard_with([("/abs.jpg", b"x")], workdir / "absolute.tar")), "absolute names are refused"
    assert refuses(shard_with([("a\\b.jpg", b"x")], workdir / "backslash.tar")), "names with \\ are refused"
### BEGIN HIDDEN TESTS
assert refuses(shard_with([("dir/a.jpg", b"x")], workdir / "nested.tar")), "names with / are refused"
assert refuses(shard_with([("ok.jpg", b"x"), ("ok.cls", b"1"), ("x..y.jpg", b"x")], workdir / "dots.tar")), \
    "names with .. are refused"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — A shuffle buffer with guarantees · 2 points · ★★★ · ~30 min
# A stream cannot be shuffled as a whole, but it can be shuffled locally by holding a few items back.
# Write the generator function `shuffle_buffer(items, *, buffer_size, generator)`: it yields the items
# of the iterable `items` (possibly a one-pass iterator) in a shuffled order, with these guarantees. How
# you meet them is up to you.
#
# 1. **Exactly once.** The output is a reordering of the input: every item once, the last ones too.
#    The items still held when the input ends come out in a random order as well, so an input no
#    longer than the buffer is shuffled as a whole.
# 2. **Bounded and lazy.** `items` is read one item at a time, as needed: when the consumer receives
#    its `n`-th item (`n` = 1, 2, ...), at most `n + buffer_size` items have been read from `items`.
#    So at most `buffer_size` items wait inside, and no item comes out more than `buffer_size`
#    positions before its input position (counting positions from 0, the item at input position `i`
#    has output position `i - buffer_size` or later).
# 3. **Seeded.** All randomness comes from `generator`, a `torch.Generator`: two generators seeded
#    alike give the same order. Different seeds give different orders (the checks try ten seeds on
#    30 items with `buffer_size=4` and expect ten different orders).
# 4. **Errors.** A `buffer_size` below 1 raises `ValueError`, at the latest when the first item is
#    asked for.

# %% nbgrader={"grade": false, "grade_id": "ex4-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def shuffle_buffer(items, *, buffer_size: int, generator: torch.Generator):
    ### BEGIN SOLUTION
    if buffer_size < 1:
        raise ValueError(f"buffer_size must be at least 1, got {buffer_size}")
    buffer = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        j = int(torch.randint(len(buffer), (1,), generator=generator))
        yield buffer[j]
        buffer[j] = item
    for j in torch.randperm(len(buffer), generator=generator).tolist():
        yield buffer[j]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def shuffled(n, *, buffer_size, seed):
    """``range(n)`` through the buffer: each item is its own input position."""
    return list(shuffle_buffer(range(n), buffer_size=buffer_size, generator=torch.Generator().manual_seed(seed)))


class Counted:
    """An iterable that records how far ahead of the consumer it has been read."""

    def __init__(self, n):
        self.n, self.read = n, 0

    def __iter__(self):
        for i in range(self.n):
            self.read += 1
            yield i


def too_early(out, buffer_size):
    """The items of ``out`` (positions of ``range(n)``) that came out more than buffer_size positions early."""
    return [item for position, item in enumerate(out) if position < item - buffer_size]


with checks("Exercise 4"):
    out = shuffled(50, buffer_size=8, seed=0)
    assert sorted(out) == list(range(50)), "every item exactly once"
    assert out == shuffled(50, buffer_size=8, seed=0), "the same seed must give the same order"
    assert out != shuffled(50, buffer_size=8, seed=1), "seeds 0 and 1 should give different orders"
    assert not too_early(out, 8), f"items {too_early(out, 8)} came out more than buffer_size=8 positions early"
    source = Counted(100)
    stream = shuffle_buffer(iter(source), buffer_size=5, generator=torch.Generator().manual_seed(1))
    taken = []
    for item in stream:
        taken.append(item)
        assert source.read <= len(taken) + 5, \
            f"{source.read} items read when the consumer received its item {len(taken)}: more than buffer_size=5 held"
    assert sorted(taken) == list(range(100)), "every item of a one-pass iterator exactly once"
    orders = {tuple(shuffled(30, buffer_size=4, seed=seed)) for seed in range(10)}
    assert len(orders) == 10, f"ten seeds gave only {len(orders)} different orders"
    short = [shuffled(6, buffer_size=10, seed=seed) for seed in range(10)]
    assert all(sorted(order) == list(range(6)) for order in short), "an input shorter than the buffer comes out whole"
    assert len({tuple(order) for order in short}) > 1, "an input shorter than the buffer is shuffled too"
    try:
        shuffled(5, buffer_size=0, seed=0)
    except ValueError:
        pass
    else:
        raise AssertionError("buffer_size=0 must raise ValueError")
### BEGIN HIDDEN TESTS
source = Counted(60)
taken = []
for item in shuffle_buffer(iter(source), buffer_size=2, generator=torch.Generator().manual_seed(9)):
    taken.append(item)
    assert source.read <= len(taken) + 2, f"{source.read} items read for {len(taken)} given: more than buffer_size=2 held"
for size in (1, 2):
    out = shuffled(40, buffer_size=size, seed=3)
    assert sorted(out) == list(range(40)) and not too_early(out, size), \
        f"buffer_size={size}: every item once, none more than {size} positions early"
assert shuffled(0, buffer_size=3, seed=0) == [], "an empty input gives nothing"
try:
    shuffled(5, buffer_size=-2, seed=0)
except ValueError:
    pass
else:
    raise AssertionError("buffer_size=-2 must raise ValueError")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — Equal shares, so that no rank waits forever · 2 points · ★☆☆ · ~10 min
# Shards are rarely equal. If rank 0 has 9 samples and rank 1 has 3, rank 1 finishes early and rank 0
# waits forever in its next all-reduce. Write `equal_share(counts, *, world_size)` for per-shard sample
# counts, with shards assigned to ranks as `counts[rank::world_size]`: return
# `(per_rank, dropped)`, the number of samples every rank takes (the smallest rank total) and how
# many samples that leaves out in total. Raise `ValueError` if there are fewer shards than ranks.

# %% nbgrader={"grade": false, "grade_id": "ex5-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def equal_share(counts: list[int], *, world_size: int) -> tuple[int, int]:
    ### BEGIN SOLUTION
    if len(counts) < world_size:
        raise ValueError(f"{len(counts)} shards cannot feed {world_size} ranks")
    totals = [sum(counts[rank::world_size]) for rank in range(world_size)]
    per_rank = min(totals)
    return per_rank, sum(totals) - per_rank * world_size
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 5"):
    assert equal_share([5, 3, 4], world_size=2) == (3, 6), equal_share([5, 3, 4], world_size=2)
    assert equal_share([4, 4], world_size=2) == (4, 0), "equal shards drop nothing"
    try:
        equal_share([3, 3], world_size=3)
    except ValueError:
        pass
    else:
        raise AssertionError("2 shards for 3 ranks must raise ValueError")
### BEGIN HIDDEN TESTS
assert equal_share([10, 1, 10, 2, 10, 3], world_size=3) == (11, 3), "three ranks: totals 12, 11, 13"
assert equal_share([7], world_size=1) == (7, 0)
try:
    equal_share([3, 3, 3], world_size=4)
except ValueError:
    pass
else:
    raise AssertionError("2 shards for 3 ranks must raise ValueError")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 — Every sample once, read by spawned workers · 1 point · ★★☆ · ~15 min
# With the `spawn` start method (the default on macOS and Windows) each DataLoader worker is a fresh
# Python process that receives the dataset *pickled* and imports everything it needs by module and name:
# a lambda, or a class or function defined in this notebook, cannot reach it. The next cell writes 24 tiny
# images into 4 shards of 6. Write `spawn_loader(manifest, *, num_workers)`: a `DataLoader` with batches
# of 4 over a `ShardedImageDataset` of those shards, without shuffling or padding (`shuffle=False`,
# `equalize="none"`), that yields 32×32 normalized images (use a preset from `common`, e.g.
# `V2EvalPreset(resize_size=32, crop_size=32)`), with `num_workers` workers started by `spawn`
# (`multiprocessing_context="spawn"`). The check reads one epoch with 2 workers (about 10 s on a 2-core laptop): every sample exactly once.

# %%
tiny = ensure_data(workdir / "shapes", SyntheticConfig(seed=5, num_train=24, num_val=6, min_size=40, max_size=60),
                   verbose=False)
source = CustomImageDataset(tiny.labels_csv("train"), tiny.images_dir("train"))
tiny_manifest = ensure_shards([(source.path(i), int(source.labels[i])) for i in range(len(source))],
                              workdir / "shards", shard_size=6, classes=tiny.classes)
print(f"{len(source)} images in {len(read_manifest(tiny_manifest))} shards")

# %% nbgrader={"grade": false, "grade_id": "ex6-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def spawn_loader(manifest, *, num_workers: int) -> DataLoader:
    ### BEGIN SOLUTION
    dataset = ShardedImageDataset(manifest, V2EvalPreset(resize_size=32, crop_size=32), shuffle=False,
                                  equalize="none")
    return DataLoader(dataset, batch_size=4, num_workers=num_workers, multiprocessing_context="spawn")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex6-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 6"):
    loader = spawn_loader(tiny_manifest, num_workers=2)
    assert loader.num_workers == 2, "start num_workers worker processes"
    context = loader.multiprocessing_context
    assert context is not None and context.get_start_method() == "spawn", 'multiprocessing_context="spawn"'
    batches = list(loader)
    images = torch.cat([images for images, _ in batches])
    labels = sorted(int(label) for _, batch_labels in batches for label in batch_labels)
    assert images.shape == (24, 3, 32, 32), f"24 images of 3x32x32 once each, got {tuple(images.shape)}"
    assert labels == sorted(int(label) for label in source.labels), "every sample exactly once"
    assert loader.batch_size == 4, f"batches of 4, got {loader.batch_size}"
    assert images.dtype == torch.float32 and images.min() < 0, "normalized float images (mean subtracted)"
    assert isinstance(loader.dataset, ShardedImageDataset), "read the shards with ShardedImageDataset"
### BEGIN HIDDEN TESTS
assert len(batches) == 6 and all(len(batch_labels) == 4 for _, batch_labels in batches), \
    "24 samples in 6 batches of 4: no padding, nothing dropped"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 7 — Debug a job that reads some samples twice · 2 points · ★★☆ · ~25 min
# The script below streams 8 shards of 6 samples (48 in all) on every rank through a `DataLoader` with
# worker processes, and reports what each rank read and what all ranks read together. Its author meant one
# pass over the data: every sample read by exactly one worker of one rank. It is the file
# `ex05_work/shard_reader.py` beside this notebook; the next cell shows it, and the one after runs it with `torchrun` on 2 processes with 2
# workers each (about 15 s on a 2-core laptop). Read the counts: what went wrong, and where in the script?

# %% tags=["demo"]
show_file(WORK / "shard_reader.py")

# %%
import subprocess

from common.ddp.launch import launch_env, torchrun_command


def run_reader(script: Path, ranks: int, workers: int) -> str:
    """``script --workers workers`` on ``ranks`` processes under torchrun; what the ranks printed."""
    if "NotImplementedError" in script.read_text():  # an unanswered exercise: no torchrun launch
        raise NotImplementedError(f"{script.name} still raises NotImplementedError")
    command = torchrun_command(str(script), ["--workers", str(workers)], nproc_per_node=ranks)
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=launch_env(threads=1),
                          check=False)
    if "NotImplementedError" in done.stderr:
        raise NotImplementedError(f"{script.name} still raises NotImplementedError")
    assert done.returncode == 0, f"{script.name} failed:\n{done.stderr[-1500:]}"
    return done.stdout

# %% tags=["demo"]
print(run_reader(WORK / "shard_reader.py", ranks=2, workers=2))

# %% [markdown]
# Your answer is a file: `ex05_work/fixed_reader.py`, handed out as a copy of the script whose first line raises
# `NotImplementedError`. Delete that line and fix the script so that, on any number of ranks with any number of
# workers, every one of the 48 samples is read exactly once per run; the check below runs it on 2 processes
# with 2 workers each (about 15 s). Keep the printed lines and the `--workers` flag. Chapter 5 shows every tool
# it takes; the hidden checks run it on other numbers of ranks and workers. Stuck? `hint("ex7", 1)` in a cell
# of your own, then `hint("ex7", 2)` and `hint("ex7", 3)`.

# %% nbgrader={"grade": false, "grade_id": "ex7-answer", "locked": true, "schema_version": 3, "solution": false, "task": false} tags=["answer-file:ex05_work/fixed_reader.py:ex05_work/shard_reader.py"]
# Exercise 7's answer is the file ex05_work/fixed_reader.py, not this cell: fix the script there and save it.
# (Grading takes that file from beside your notebook.)

# %% nbgrader={"grade": true, "grade_id": "ex7-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def read_counts(printed: str) -> tuple[int, int, int]:
    found = re.findall(r"^all ranks: (\d+) samples, (\d+) distinct, (\d+) never read$", printed, re.M)
    assert len(found) == 1, f"expected one line 'all ranks: ...' from rank 0, got:\n{printed}"
    return tuple(int(n) for n in found[0])


with checks("Exercise 7"):
    printed = run_reader(WORK / "fixed_reader.py", ranks=2, workers=2)
    read, distinct, missing = read_counts(printed)
    assert missing == 0, f"{missing} samples were never read: the ranks must agree on the shard order"
    assert read == distinct == 48, f"{read} samples read, {distinct} distinct: each worker of each rank needs shards of its own"
### BEGIN HIDDEN TESTS
printed = run_reader(WORK / "fixed_reader.py", ranks=1, workers=3)
assert read_counts(printed) == (48, 48, 0), f"1 rank with 3 workers (8 shards for 3 consumers) reads:\n{printed}"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
# - Consumers are (rank, worker) pairs; striding shards over them reads each shard exactly once.
# - Cutting shards by bytes keeps them even when samples differ in size; fixed member order and metadata give byte-identical files.
# - Read untrusted shards member by member, refusing links and path tricks, extracting nothing.
# - A shuffle buffer trades memory for randomness: holding `k` items, nothing leaves more than `k` positions early; its order depends only on the seed.
# - Equal per-rank sample counts (drop the excess) keep DDP's collectives in step.
# - Under `spawn`, workers get the dataset pickled and import the rest: everything they need lives in a module.
#
# ## Exercises
# Further practice, not graded: combine `shards_for`, `read_shard` and `shuffle_buffer` in an
# `IterableDataset` that calls `torch.utils.data.get_worker_info()`, and check exactly-once coverage
# with `num_workers=2`.
