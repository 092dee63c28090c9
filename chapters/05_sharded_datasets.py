# %% [markdown]
# # Chapter 5 — Sharded, streaming datasets
# **Guide sections:** beyond the guide (it breaks off in §2.3.1); builds on §2.1.2 数据管道在深度学习中的作用
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - Why a map-style `Dataset` of millions of small files stops scaling, and what an iterable dataset over *shards* changes.
# - The WebDataset shard format (`<key>.jpg` + `<key>.cls` in plain tar files) and a manifest with counts and checksums.
# - How work is split by rank, then by DataLoader worker, so that every sample is seen exactly once.
# - Why every rank must yield the same number of batches under DDP, the pad/drop policies that guarantee it, and DDP's `Join`, which copes when they differ.
# - How much a bounded shuffle buffer shuffles, measured; and training the Chapter 2 model from shards on 2 processes.
# - How a run stopped mid-epoch resumes by sample offset, on another number of ranks or workers, without reading what it consumed.
#
# > **Prerequisites:** chapters 2.1 and 4.2 · **Time:** about 30 min to read, 3 min to run on a 2-core laptop · **Main path:** every section; the ones titled "Going further" (WebDataset, reading shards safely) are optional.

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/05_sharded_datasets.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/05_sharded_datasets.ipynb)
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
# Imports (standard library, third party, then `common`), the seed and the device. WebDataset is an
# optional dependency (`pip install -e .[shards]`); the section that uses it is skipped without it.

# %%
import importlib.util
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import PIL.Image
import torch
from torch.utils.data import IterableDataset, get_worker_info
from tqdm.auto import tqdm

from common import (
    CustomImageDataset,
    V2EvalPreset,
    ensure_data,
    get_device,
    seed_everything,
)
from common.data import CustomDataset
from common.ddp.launch import torchrun_command
from common.ddp.uneven import join_reference
from common.readings import read_figure
from common.shards import (
    ShardedImageDataset,
    ShardError,
    ShardInfo,
    ensure_shards,
    read_manifest,
    worker_quotas,
)
from common.shards import train as shard_train
from common.source import show_file, show_source
from common.synthetic import default_data_root

wds = importlib.import_module("webdataset") if importlib.util.find_spec("webdataset") else None
generator = seed_everything(0)
device = get_device()
SCRIPTS = Path("scripts/05")  # the script this chapter runs, in the repository
print("torch", torch.__version__, "| device:", device, "| webdataset:",
      wds.__version__ if wds else "not installed")

# %% tags=["parameters"]
# Sizes of this chapter's runs. `make test` runs the notebook with smaller ones (tests/notebook_parameters.py).
NUM_EPOCHS = 10  # epochs of the 2-process training from shards

# %% [markdown]
# ## Map-style vs iterable datasets at scale
# The guide promises that a good pipeline "supports larger datasets" (§2.1.2). The map-style
# `CustomImageDataset` of Chapter 2 answers `dataset[i]` by opening file `i`: random access, one file
# open (one request, on object storage) per sample. That is fine for 960 files on a local disk. With
# 100 million files it is not: listing them takes hours, each small read pays a full request latency,
# and file systems slow down with many small files. An **iterable** dataset instead *streams*: it
# reads a few large files (shards) sequentially, and the `DataLoader` just takes what comes.
#
# Our training set, as files:

# %%
data = ensure_data()
files = sorted(data.images_dir("train").iterdir())
sizes = np.array([f.stat().st_size for f in files])
print(f"{len(files)} files, {sizes.sum() / 1e6:.1f} MB, median {np.median(sizes) / 1e3:.1f} kB per file")

# %% [markdown]
# ## The shard format, written by hand
# A shard is a plain tar file. Sample `key` becomes two members side by side: `key.jpg`, the original image
# bytes (not re-encoded), and `key.cls`, the label as ASCII digits — the WebDataset convention. Python's
# `tarfile` writes and reads it in a few lines; fixed member metadata (mtime 0) makes the same samples give
# the same bytes. Written into `runs/05/` (git-ignored):

# %%
scratch = Path("../runs/05")
shutil.rmtree(scratch, ignore_errors=True)
scratch.mkdir(parents=True)


def write_shard(path: Path, samples: list[tuple[str, bytes, int]]) -> None:
    with tarfile.open(path, "w") as tar:
        for key, image_bytes, label in samples:
            for name, payload in ((f"{key}.jpg", image_bytes), (f"{key}.cls", str(label).encode())):
                member = tarfile.TarInfo(name)
                member.size, member.mtime = len(payload), 0
                tar.addfile(member, io.BytesIO(payload))


def read_shard(path: Path):
    """Yield (key, image bytes, label): one pass over the members, those of one key grouped together."""
    with tarfile.open(path, mode="r|") as tar:  # "r|": a forward-only stream, one sequential read
        for key, members in itertools.groupby(tar, key=lambda member: member.name.split(".")[0]):
            fields = {m.name.split(".", 1)[1]: tar.extractfile(m).read() for m in members}
            yield key, fields["jpg"], int(fields["cls"])


labels = pd.read_csv(data.labels_csv("train"))
mine = [(f"{i:08d}", (data.images_dir("train") / name).read_bytes(), int(label))
        for i, (name, label) in enumerate(zip(labels.file_name[:5], labels.label[:5], strict=True))]
write_shard(scratch / "by-hand.tar", mine)
back = list(read_shard(scratch / "by-hand.tar"))
assert back == mine, "the same keys, bytes and labels come back"
with tarfile.open(scratch / "by-hand.tar") as tar:
    print(pd.DataFrame([(m.name, m.size, m.mtime) for m in tar.getmembers()], columns=["member", "bytes", "mtime"]))

# %% [markdown]
# That is the whole format. `common.shards.format` is the complete version: a manifest with every shard's
# sample count and sha256, deterministic writing (also uid/gid and mode fixed), and a reader that refuses
# unsafe or broken members. What it refuses (members named with `..`, links, cut-off tars, a flipped
# byte) is in the appendix at the end of this chapter.
#
# ## Writing shards with `make_shards.py`
# `data_scripts/make_shards.py` (in a checkout; `python -m common.shards.make` or `companion-make-shards`
# wherever the package is installed: it is the same command) packs the CSV + images dataset into tar shards of a chosen number of
# samples, in the WebDataset convention: sample `i` becomes members `0000000i.jpg` (the original bytes,
# not re-encoded) and `0000000i.cls` (the label as text), side by side. The command line, run here on the
# validation split into a temporary folder:

# %%
cli = [sys.executable, "-m", "common.shards.make", "--csv", str(data.labels_csv("val")),
       "--images", str(data.images_dir("val")), "--out", str(scratch / "val"), "--shard-size", "64"]
print(subprocess.run(cli, capture_output=True, text=True, check=True).stdout)

# %% [markdown]
# The notebook's own shards live in `data/shards/` (git-ignored). `ensure_shards` writes them from the
# generated dataset if they are missing or fail their checksums, and otherwise leaves them alone:

# %%
SHARD_ROOT = default_data_root() / "shards"
manifests = {}
for split in ("train", "val"):
    dataset = CustomImageDataset(data.labels_csv(split), data.images_dir(split))
    samples = [(dataset.path(i), int(dataset.labels[i])) for i in range(len(dataset))]
    manifests[split] = ensure_shards(samples, SHARD_ROOT / split, shard_size=64, classes=data.classes)
manifest = json.loads(manifests["train"].read_text())
pd.DataFrame(manifest["shards"]).assign(sha256=lambda f: f.sha256.str[:12]).head()

# %% [markdown]
# 960 samples in 15 shards of 64: a handful of sequential reads instead of 960 opens. What is inside a
# shard: plain tar members with fixed metadata (mtime 0, uid 0, mode 644), so the same input always gives
# byte-identical shards and the checksums in the manifest are reproducible.

# %%
with tarfile.open(SHARD_ROOT / "train" / manifest["shards"][0]["name"]) as tar:
    members = tar.getmembers()
assert {m.mtime for m in members} == {0} and len(members) == 2 * 64
pd.DataFrame([(m.name, m.size, m.mtime, oct(m.mode)) for m in members[:6]],
             columns=["member", "bytes", "mtime", "mode"])

# %% [markdown]
# What the two layouts cost to read once: the 960 files in a random order (as a shuffled map-style
# dataset reads them) against the 15 shards front to back. On a local disk with a warm page cache the
# times are close; what differs is the number of opens, and on network or object storage each open is a
# request that costs milliseconds before the first byte arrives.

# %%
def read_all(paths: list[Path]) -> tuple[int, float]:
    start = time.perf_counter()
    total = sum(len(path.read_bytes()) for path in paths)
    return total, time.perf_counter() - start

shard_paths = [shard.path for shard in read_manifest(manifests["train"])]
random_files = [files[i] for i in np.random.default_rng(0).permutation(len(files))]
reads = pd.DataFrame([("960 files, random order", len(random_files), *read_all(random_files)),
                      ("15 shards, sequential", len(shard_paths), *read_all(shard_paths))],
                     columns=["layout", "opens", "bytes", "seconds"])
reads.assign(MB=reads.bytes / 1e6).drop(columns="bytes").round(3)

# %% [markdown]
# ## Reading shards: by hand, then `ShardedImageDataset`
# A sample is `read_shard`'s loop plus a decode: the JPEG bytes become a PIL image, the transform (the
# Chapter 2 presets) makes it a tensor. The first training shard, by hand, against the map-style dataset:

# %%
def decode(image_bytes: bytes, label: int, transform=None):
    image = PIL.Image.open(io.BytesIO(image_bytes)).convert("RGB")
    return (transform(image) if transform else image), label


preset = V2EvalPreset(resize_size=64, crop_size=64)
mapped = CustomImageDataset(data.labels_csv("train"), data.images_dir("train"), transform=preset)
first_shard = [decode(image_bytes, label, preset) for _, image_bytes, label in read_shard(shard_paths[0])]
for i, (image, label) in enumerate(first_shard):
    assert torch.equal(image, mapped[i][0]) and label == mapped[i][1], f"sample {i}"
print(f"{len(first_shard)} samples from {shard_paths[0].name}, each equal to the map-style dataset's;",
      "sample 0:", tuple(first_shard[0][0].shape), first_shard[0][1])

# %% [markdown]
# `ShardedImageDataset` is the same reader as an `IterableDataset`: no `__getitem__`, only `__iter__`. It
# takes the same transform presets and yields the same `(image, label)` pairs; without shuffling, in CSV
# order, so we can compare tensor for tensor:

# %%
streamed = ShardedImageDataset(manifests["train"], preset, shuffle=False, equalize="none")
image, label = next(iter(streamed))
assert torch.equal(image, first_shard[0][0]) and label == first_shard[0][1]
print(image.shape, label)

# %% [markdown]
# ## Who reads which shard
# With DDP every rank runs its own copy of the dataset, and each rank's `DataLoader` starts
# `num_workers` copies more. Without care, all of them read the same shards and every sample is seen
# `world_size × num_workers` times. The fix is to deal the shards out like cards: first by rank, then by
# worker within the rank. In a few lines (inside a worker, `torch.utils.data.get_worker_info()` gives
# `worker` and `num_workers`; `rank` and `world_size` come from the process group):

# %%
def my_shards(shards: list, *, rank: int, world_size: int, worker: int, num_workers: int) -> list:
    return shards[rank::world_size][worker::num_workers]


names = [shard["name"] for shard in manifest["shards"]]
consumers = [(r, w) for r in range(2) for w in range(2)]
by_hand = {c: my_shards(names, rank=c[0], world_size=2, worker=c[1], num_workers=2) for c in consumers}
assert sorted(n for shards in by_hand.values() for n in shards) == sorted(names), "each shard exactly once"
grid = np.array([[name in by_hand[c] for name in names] for c in consumers])
fig, ax = plt.subplots(figsize=(8, 1.8))
ax.imshow(grid, cmap="Greys", aspect="auto")
ax.set(title="shards[rank::2][worker::2]", xlabel="shard", yticks=range(4),
       yticklabels=[f"rank {r} worker {w}" for r, w in consumers])
plt.show()

# %% [markdown]
# The same deal, drawn for 8 shards, 2 ranks and 2 workers per rank, with the code's own `split_shards`:
#
# ![Shards dealt out to ranks and workers](figures/shard_assignment.svg)
#
# *Each shard goes to exactly one (rank, worker): the shards are dealt out by rank first, then by worker, so no sample is read twice.*

# %% [markdown]
# The reader and the deal together make a first streaming dataset. `__iter__` asks `get_worker_info()` who
# is reading (`None` in the main process, else the worker's `id` and the loader's `num_workers`) and reads
# only its shards; `rank` and `world_size` are given, as the process group would give them:

# %%
class ShardStream(IterableDataset):
    def __init__(self, paths, transform=None, *, rank=0, world_size=1):
        self.paths, self.transform, self.rank, self.world_size = list(paths), transform, rank, world_size

    def shards_for(self, worker=0, num_workers=1):
        return my_shards(self.paths, rank=self.rank, world_size=self.world_size,
                         worker=worker, num_workers=num_workers)

    def __iter__(self):
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for path in self.shards_for(worker, num_workers):
            for _, image_bytes, label in read_shard(path):
                yield decode(image_bytes, label, self.transform)

# %% [markdown]
# Checked twice. The four consumers of 2 ranks × 2 workers (each asked for its shards, as its
# `get_worker_info()` would tell it) read every key of the training set once, without decoding. And one
# reader alone yields the validation set exactly as `ShardedImageDataset` does, tensor for tensor.

# %%
keys = Counter(key for rank in range(2) for worker in range(2)
               for path in ShardStream(shard_paths, rank=rank, world_size=2).shards_for(worker, 2)
               for key, _, _ in read_shard(path))
assert len(keys) == 960 and set(keys.values()) == {1}
val_paths = [shard.path for shard in read_manifest(manifests["val"])]
ours = list(ShardStream(val_paths, preset))
theirs = list(ShardedImageDataset(manifests["val"], preset, shuffle=False, equalize="none"))
assert len(ours) == len(theirs) == 240
assert all(torch.equal(a, b) and la == lb for (a, la), (b, lb) in zip(ours, theirs, strict=True))
print(f"train: {len(keys)} keys, each read {set(keys.values())} time(s); val: {len(ours)} samples, identical")

# %% [markdown]
# In the grid above every column has one dark cell: each shard is read by exactly one consumer. Dealt in this fixed order,
# though, rank 0 would read the same shards every epoch. `ShardedImageDataset` deals a permutation of the
# shards seeded by `(seed, epoch)` instead, the same on every rank, with the same two slices. Its plan for
# 2 ranks × 2 workers, checked against the few lines above:

# %%
train_set = ShardedImageDataset(manifests["train"], seed=0, rank=0, world_size=2, equalize="none")
plan = train_set.plan(num_workers=2, epoch=0)
order = [names[i] for i in train_set.shard_order(0)]
assert [list(row) for row in plan.shards] == [my_shards(order, rank=r, world_size=2, worker=w, num_workers=2)
                                              for r, w in consumers]
plan[["rank", "worker", "shards", "samples"]]

# %% [markdown]
# The same picture for two epochs of `ShardedImageDataset`: still one dark cell per column, and the
# assignment changes from epoch to epoch (so each rank sees different data every epoch).

# %%
index_of = {shard["name"]: i for i, shard in enumerate(manifest["shards"])}
fig, axes = plt.subplots(1, 2, figsize=(11, 2.4))
for epoch, ax in enumerate(axes):
    table = train_set.plan(num_workers=2, epoch=epoch)
    grid = np.zeros((len(table), len(manifest["shards"])))
    for row, names in enumerate(table.shards):
        grid[row, [index_of[name] for name in names]] = 1
    ax.imshow(grid, cmap="Greys", aspect="auto")
    ax.set(title=f"epoch {epoch}", xlabel="shard", yticks=range(len(table)),
           yticklabels=[f"rank {r} worker {w}" for r, w in zip(table["rank"], table.worker, strict=True)])
plt.tight_layout()

# %% [markdown]
# The claim, checked: gather the keys every consumer yields (without decoding the images) and count.

# %%
seen = Counter()
for rank in range(2):
    consumer = ShardedImageDataset(manifests["train"], rank=rank, world_size=2, equalize="none")
    for worker in range(2):
        seen.update(r.key for r in consumer.records(worker=worker, num_workers=2))
assert len(seen) == 960 and set(seen.values()) == {1}
print(f"{len(seen)} distinct samples, each seen {set(seen.values())} time(s)")

# %% [markdown]
# `ShardStream.__iter__` grown up is `ShardedImageDataset.__iter__`: the same question to
# `get_worker_info()`, then a decode that names shard and member on failure (and can skip PIL for uint8
# transforms), the transform, and a `target_transform`:

# %%
show_source(ShardedImageDataset.__iter__)

# %% [markdown]
# and its `records` is `shards_for` + `read_shard` grown up: the deal of a permutation that changes with
# the epoch (`split_shards`), a reader that checks every member and the sample count of the manifest,
# the shuffle buffer and the equal quotas of the next two sections:

# %%
show_source(ShardedImageDataset.records)

# %% [markdown]
# ## Equal batches on every rank
# 15 shards do not split evenly over 2 ranks: one rank gets 8 shards (512 samples), the other 7 (448).
# Under DDP each backward pass is a collective all-reduce that *every* rank must join. The rank with
# fewer batches finishes its epoch and moves on, while the other waits inside its next all-reduce for a
# partner that never comes: the job hangs (or fails after a long timeout). `DistributedSampler` avoids
# this for map-style datasets by padding; a streaming dataset must do the same from the manifest counts,
# *before* reading anything. Two documented policies, both giving worker `w` the same quota on every rank:
#
# - `equalize="pad"` (default for training): quota = the largest count; shorter consumers repeat their first few samples.
# - `equalize="drop"`: quota = the smallest count; longer consumers stop early (different samples each epoch).
# - `equalize="none"`: raw counts, every sample exactly once: for evaluation, or one process.

# %%
rows = []
for policy in ("none", "pad", "drop"):
    for rank in range(2):
        ds = ShardedImageDataset(manifests["train"], rank=rank, world_size=2, equalize=policy)
        table = ds.plan(num_workers=2, epoch=0)
        mine = table[table["rank"] == rank]
        rows.append({"policy": policy, "rank": rank, "samples": int(mine.yields.sum()),
                     "batches of 32": int(np.ceil(mine.yields / 32).sum()),
                     "padded": int(mine.padded.sum()), "dropped": int(mine.dropped.sum())})
counts = pd.DataFrame(rows)
assert counts[counts.policy != "none"].groupby("policy")["batches of 32"].nunique().eq(1).all()
counts

# %% [markdown]
# Because quotas are equal *per worker*, the batch counts match for any `batch_size`, with or without
# `drop_last`: each worker batches its own stream. The rule in one line (`worker_quotas`), on counts
# `[rank, worker]`:

# %%
print(worker_quotas(np.array([[260, 252], [192, 256]]), "pad").tolist(),
      worker_quotas(np.array([[260, 252], [192, 256]]), "drop").tolist())

# %% [markdown]
# ## Uneven batches with DDP's `Join`
# Padding and dropping change the *data* so that every rank has the same number of batches. PyTorch's
# `Join` context manager (`torch.distributed.algorithms.join`) takes the other way: the counts may differ,
# and the *training* copes. Inside `with Join([model]):` a rank that runs out of batches does not leave:
# it *joins*, and from then on it shadows the all-reduces that DDP still runs on the other ranks,
# contributing zero gradients, until every rank has joined; then the weights of the rank that ran longest
# are broadcast to all, so the replicas end equal. No sample is repeated or dropped.
#
# The script below shows both sides on 2 CPU ranks, with the batch counts of `equalize="none"` in the
# table above: 16 on rank 0, 14 on rank 1. A linear model on random data stands in for the real one,
# since only the number of batches matters here. It trains twice, each time in a process group of its
# own: first in plain DDP (`Join(..., enable=False)` is a no-op), with a group timeout of 2 s so that the
# wait of the rank left behind ends in an error instead of a hang; then inside `Join`. It is the file
# `scripts/05/uneven.py`:

# %%
show_file(SCRIPTS / "uneven.py")

# %% [markdown]
# Launched with `torchrun` on 2 processes, with the batch counts from the table (the ranks' lines
# interleave in the pipe; sorted by rank they read in turn):

# %%
uneven = [int(n) for n in counts[counts.policy == "none"]["batches of 32"]]  # [16, 14]
command = torchrun_command(str(SCRIPTS / "uneven.py"), ["--batches", *map(str, uneven), "--timeout", "2"])
done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                      env={**os.environ, "OMP_NUM_THREADS": "1"})
assert done.returncode == 0, done.stderr[-2000:]
printed = sorted(done.stdout.splitlines(), key=lambda line: line.split(":")[0])
print("\n".join(printed))

# %% [markdown]
# In plain DDP rank 1 finished its 14 batches, and rank 0 waited inside the all-reduce of its 15th for a
# partner that never came, until the 2-second timeout failed it (with the default timeout of 30 minutes,
# the job would simply have hung). Inside `Join` both ranks ran all their batches, and rank 1 ended with
# the very weights rank 0 computed in its last two steps, which it never ran itself:

# %%
failed = next(line for line in printed if line.startswith("rank 0: join=False: "))
assert "failed after" in failed and "Timed out" in failed, failed
assert f"rank 1: join=False: trained on all {uneven[1]} batches" in printed
assert all(f"rank {rank}: join=True: trained on all {uneven[rank]} batches" in printed for rank in (0, 1))
assert all(f"rank {rank}: join=True: weights equal on all ranks: True" in printed for rank in (0, 1))
print("plain DDP waits for the rank that ran out; Join finishes, with equal replicas")

# %% [markdown]
# What `Join` costs, and where it stops: every step runs one more small all-reduce (the ranks ask whether
# anyone has joined). It shadows only the collectives of what it was given, DDP's all-reduces here (and
# `ZeroRedundancyOptimizer`'s, if listed); any other collective in the loop, a metric summed with
# `all_reduce` say, would still wait for the rank that has left. The steps in which some ranks have
# joined divide the gradient by the *initial* world size (`divide_by_initial_world_size=True`), so they
# are smaller steps. And `Join(..., throw_on_early_termination=True)` raises on every rank as soon as one
# runs out: the "drop" policy, enforced by the loop. This chapter's training keeps the pad policy: quotas
# planned from the manifest work with any loop and any collective, and keep every step an average over
# the whole global batch.
#
# **The same in `common`, with the hardening:** `common/ddp/uneven.py` (`torchrun ... -m
# common.ddp.uneven --batches 16 14`) runs both attempts with a checked command line, reports per rank
# the steps run and the error (as JSON), and compares the weights with `join_reference`, the same training
# replayed in one process, which makes "zero gradients over the initial world size" exact:

# %%
show_source(join_reference)

# %% [markdown]
# ## Shuffling quality vs buffer size
# A streaming dataset cannot draw a random index; it shuffles in two cheap stages instead: a random
# *shard order*, then a *shuffle buffer* of `buffer_size` samples from which it emits a random one and
# refills the gap. How well does that mix? The hard case is real and common: data written in class order,
# as `ImageFolder` lists it (all circles, then all squares, ...). We shard the `imagefolder` copy of the
# training set in that order:

# %%
by_class = CustomDataset.from_folder(data.imagefolder_dir("train"))
sorted_manifest = ensure_shards(by_class.samples, SHARD_ROOT / "train_by_class", shard_size=64)
print([by_class.samples[i][1] for i in range(0, 960, 64)], "<- label at the start of each shard")

# %% [markdown]
# The measure: the mean number of distinct classes in a batch of 32 (a fully random order gives nearly
# all 6; an unshuffled class-sorted stream gives about 1). We read only keys and labels (no decoding),
# for several buffer sizes, and average over 3 epochs; the last column is a full random permutation.

# %%
def classes_per_batch(labels: list[int], batch_size: int = 32) -> float:
    return float(np.mean([len(set(labels[i:i + batch_size])) for i in range(0, len(labels), batch_size)]))

buffer_sizes = [0, 8, 32, 128, 512]
quality = {}
for buffer_size in tqdm(buffer_sizes, desc="buffer sizes"):
    ds = ShardedImageDataset(sorted_manifest, buffer_size=buffer_size, equalize="none", verify=False)
    scores = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        scores.append(classes_per_batch([r.label for r in ds.records()]))
    quality[buffer_size] = float(np.mean(scores))
ideal = classes_per_batch(np.random.default_rng(0).permutation([s[1] for s in by_class.samples]).tolist())
pd.Series({**quality, "full random": ideal}, name="classes per batch of 32").to_frame().T

# %% [markdown]
# A plot tells it faster (buffer 0 is drawn at 1 on the log axis): shard shuffling alone does not help
# at all when each shard holds only one or two classes; a buffer of 2 shards (128 samples) gets most of
# the way, and only one that spans many shards (512 samples = 8 shards) looks as random as a full
# permutation. Rule of thumb: make the buffer several shards' worth, or (better) write shards from
# shuffled data.

# %%
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot([max(b, 1) for b in buffer_sizes], list(quality.values()), marker="o", label="shard order + buffer")
ax.axhline(ideal, color="grey", linestyle="--", label="full random permutation")
ax.set(xscale="log", xlabel="shuffle buffer size (samples, log)", ylabel="distinct classes / batch",
       title="Class-sorted shards of 64")
assert quality[512] > 2 * quality[0]
ax.legend()
plt.show()

# %% [markdown]
# ## Training the Chapter 2 model from shards with DDP
# `common/shards/train.py` trains `SmallCNN` from the shards on every rank, with the DDP trainer's random
# crops and flips (`CropFlip`, or Chapter 2's `V2EvalPreset` with `--no-augment`) and `equalize="pad"`, and prints the batches
# each rank ran. Multi-process work is launched as a
# subprocess, exactly as on a real machine:
#
#     torchrun --standalone --nproc_per_node=2 -m common.shards.train --shards data/shards/train --val-shards data/shards/val
#
# `NUM_EPOCHS` (ten) short epochs on 32-pixel images without augmentation (Chapter 1's setting), 16 steps per rank each,
# a few seconds per epoch on two CPU cores (each epoch's time is printed): enough to show the mechanics (equal batch counts on uneven
# shards, no hang) and a model that learns — the loss falls well below chance level (ln 6 ≈ 1.79) and
# validation accuracy climbs far above 1/6, though with a constant learning rate it still jumps around
# (Chapter 1 showed why; exercise 5 adds a learning-rate schedule).

# %%
run_file = scratch / "shard_run.json"
command = torchrun_command("common.shards.train", [
    "--shards", str(SHARD_ROOT / "train"), "--val-shards", str(SHARD_ROOT / "val"),
    "--num-epochs", str(NUM_EPOCHS), "--image-size", "32", "--no-augment", "--out", str(run_file)])
start = time.perf_counter()
done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                      env={**os.environ, "OMP_NUM_THREADS": "1"})
print(done.stdout, f"[{time.perf_counter() - start:.0f} s, exit code {done.returncode}]")
assert done.returncode == 0, done.stderr[-2000:]

# %% [markdown]
# The JSON rank 0 wrote: per epoch, the batches and samples of every rank. 960 samples split 512/448
# became 512/512 by padding; both ranks ran the same number of steps. Whether the model learned is a
# reading, not a check: after ten epochs the loss is well below chance level (ln 6 ≈ 1.79).

# %%
epochs = pd.DataFrame(json.loads(run_file.read_text())["epochs"])
assert all(b[0] == b[1] for b in epochs.batches_per_rank)
print(f"last training loss {epochs.train_loss.iloc[-1]:.2f} (chance: ln 6 = 1.79), "
      f"best validation accuracy {epochs.val_acc.max():.2f} (chance: 1/6)")
epochs[["epoch", "batches_per_rank", "samples_per_rank", "train_loss", "val_acc"]]

# %% [markdown]
# ## Resuming mid-epoch by offset
# A long run is stopped: a node fails, a job's time runs out. Chapter 4.2's trainer resumes mid-epoch
# because its sampler knows the epoch's permutation of indices. A stream has no indices: restarting the
# epoch trains the first samples twice, and torchdata's `StatefulDataLoader` makes an `IterableDataset`
# exact by reading and decoding the consumed batches again and throwing them away, which costs most of an
# epoch when the stop came late. Yet everything that orders a `ShardedImageDataset` epoch (the shard
# permutation, the plan, the shuffle buffer's draws, the pad and drop quotas, the DataLoader taking one
# batch from each worker in turn) depends on seeds and counts only. Replayed on integers, it gives each
# rank's whole sequence, as (shard, place in the shard), before any shard is read. The samples a rank has
# consumed are then a prefix of its sequence, and one count per rank says where the epoch stands:
# `state_dict(batches, num_workers=...)`. `load_state_dict` on a new dataset reads only the rest, each
# sample at its offset in its tar (the tar headers give the offsets), on any number of ranks and workers.
#
# We stop an epoch on 2 ranks (batch 32 each) after 10 of its 16 steps, and resume it on 1 rank with
# batch 64, the same global batch. A transform that counts its calls counts the images decoded:

# %%
class Counted:
    """A transform that counts the images it is given (each was decoded just before)."""

    def __init__(self) -> None:
        self.transform, self.calls = V2EvalPreset(resize_size=32, crop_size=32), 0

    def __call__(self, image):
        self.calls += 1
        return self.transform(image)


def shard_epoch(rank: int, world_size: int, batch_size: int, *, state=None, stop=None):
    """One rank's labels per batch for epoch 0 (or the epoch of ``state``), and its dataset."""
    ds = ShardedImageDataset(manifests["train"], Counted(), rank=rank, world_size=world_size,
                             batch_size=batch_size, verify=False)
    if state is None:
        ds.set_epoch(0)
    else:
        ds.load_state_dict(state)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size)
    return [labels.tolist() for _images, labels in itertools.islice(loader, stop)], ds


def job_order(per_rank: list) -> list:
    """Step by step, rank by rank: the order in which the whole job trains on the samples."""
    return [label for step in itertools.zip_longest(*per_rank, fillvalue=[]) for batch in step
            for label in batch]


whole = [shard_epoch(rank, 2, 32)[0] for rank in range(2)]
stopped = [shard_epoch(rank, 2, 32, stop=10) for rank in range(2)]
state = stopped[0][1].state_dict(10, num_workers=0)
print(state)
rest, resumed = shard_epoch(0, 1, 64, state=state)
assert job_order([b for b, _ in stopped]) + job_order([rest]) == job_order(whole), "the same samples, in order"
assert resumed.transform.calls == len(job_order([rest])) == 1024 - 640, "only the rest decoded"
print(f"stopped after {len(job_order([b for b, _ in stopped]))} samples; resumed on 1 rank: "
      f"{resumed.transform.calls} decoded, the uninterrupted epoch's rest in its order")

# %% [markdown]
# What it saves against the replay: the time from the restart to the first new batch. The replay reads
# and decodes the 10 consumed batches of each rank again; the resume starts at the 11th:

# %%
def first_new_batch(state=None) -> float:
    start = time.perf_counter()
    ds = ShardedImageDataset(manifests["train"], Counted(), rank=0, world_size=2, batch_size=32,
                             verify=False)
    if state is None:  # replay: read, decode and drop the consumed batches
        ds.set_epoch(0)
        batches = itertools.islice(torch.utils.data.DataLoader(ds, batch_size=32), 10, None)
    else:
        ds.load_state_dict(state)
        batches = iter(torch.utils.data.DataLoader(ds, batch_size=32))
    next(batches)
    return time.perf_counter() - start


replay = min(first_new_batch() for _ in range(3))
offset = min(first_new_batch(state) for _ in range(3))
print(f"first new batch: replay {replay * 1e3:.0f} ms, resume by offset {offset * 1e3:.0f} ms")
read_figure("05/resume-vs-replay", replay / offset, unit="×",
            what="time to the first new batch: replaying 10 consumed batches against resuming by offset",
            expect=(">=", 3.0))

# %% [markdown]
# `common.shards.train` saves this state beside its snapshot (`--snapshot-every N` steps, and at
# `--max-steps`) and resumes from it to the weights of the uninterrupted run (tested in
# `tests/unit/test_shard_resume.py`, and on 2 ranks with other worker counts in
# `tests/system/test_shard_train.py`). One process, stopped after 20 of its 30 steps of the first epoch:

# %%
resume_args = ["--shards", str(SHARD_ROOT / "train"), "--val-shards", str(SHARD_ROOT / "val"),
               "--image-size", "32", "--no-augment", "--num-epochs", "1", "--snapshot",
               str(scratch / "resume.pt"), "--equalize", "none"]
first = shard_train.train(shard_train.parse_args([*resume_args, "--max-steps", "20"]))
second = shard_train.train(shard_train.parse_args(resume_args))
assert [epoch["samples_per_rank"] for epoch in first + second] == [[640], [320]]

# %% [markdown]
# ## Going further: the same shards with WebDataset
# Our shards are ordinary WebDataset shards, so the `webdataset` library reads them as they are:
# `WebDataset(urls)` streams the tars, `.decode("pil")` decodes `.jpg` to PIL and `.cls` to `int`. We
# compare the decoded pixels of the validation set with ours (as a multiset of pixel hashes).

# %%
def pixel_key(image, label) -> tuple[int, int]:
    return hash(np.asarray(image.convert("RGB")).tobytes()), int(label)

ours = Counter(pixel_key(*pair) for pair in ShardedImageDataset(manifests["val"], shuffle=False, equalize="none"))
if wds is not None:
    urls = [str(shard.path) for shard in read_manifest(manifests["val"])]
    theirs = Counter(pixel_key(*pair) for pair in
                     wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls"))
    assert theirs == ours
print(f"{sum(ours.values())} samples;", "identical in webdataset" if wds else "webdataset not installed")

# %% [markdown]
# In training code, `webdataset` adds `split_by_node`/`split_by_worker`, `.shuffle(n)` and resampling;
# what it leaves to you is exactly what this chapter built: equal batches per rank (`with_epoch`,
# `with_length`), and checksums.

# %% [markdown]
# ## Going further: reading shards safely
# A shard is input from elsewhere. `ShardedImageDataset` never extracts to disk, and still refuses a
# member named with `..` or an absolute path, links, folders and devices, a short or cut-off tar, and a
# shard whose sha256 disagrees with the manifest, each with an error that names the shard and member.
# A crafted shard with a `../` member:

# %%
evil = scratch / "evil.tar"
with tarfile.open(evil, "w") as tar:
    for name, payload in (("../escape.jpg", b"x"), ("../escape.cls", b"0")):
        info = tarfile.TarInfo(name)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
try:
    list(ShardedImageDataset([ShardInfo(evil, 1)]))
except ShardError as error:
    print(error)

# %% [markdown]
# And one flipped byte in a copy of a real shard: the manifest's checksum catches it before training starts.

# %%
copy = scratch / "copy"
copy.mkdir()
for path in (SHARD_ROOT / "val").iterdir():
    (copy / path.name).write_bytes(path.read_bytes())
first = copy / "shard-000000.tar"
corrupted = bytearray(first.read_bytes())
corrupted[5000] ^= 1  # one bit, inside the first image
first.write_bytes(bytes(corrupted))
try:
    ShardedImageDataset(copy)
except ShardError as error:
    print(error)

# %% [markdown]
# ## Summary
# - A map-style dataset opens one file per sample; at scale, stream few large **shards** sequentially with an `IterableDataset`.
# - Shards here are plain tars in the WebDataset convention plus a manifest of counts and sha256, written deterministically by `data_scripts/make_shards.py`.
# - Split shards by rank, then by worker: every sample exactly once across `world_size × num_workers` consumers.
# - Under DDP every rank needs the same number of batches: pad or drop to equal per-worker quotas computed from the manifest, or let the counts differ inside DDP's `Join([model])`, where a rank that runs out shadows the others' all-reduces (DDP's only).
# - A shuffle buffer only mixes within its span: make it several shards long, or shuffle before sharding.
# - The order of an epoch is known without reading a shard, so a stopped run resumes by sample offset: one count per rank, the rest read at its place in its tar, on any number of ranks and workers.
#
# ## Further reading
# - [`torch.utils.data`](https://pytorch.org/docs/stable/data.html): iterable-style datasets, `get_worker_info` and the worker-splitting example this chapter's reader builds on.
# - [Distributed Data Parallel notes](https://pytorch.org/docs/stable/notes/ddp.html): why every rank must run the same all-reduces, the reason for equal batch counts.
# - [Distributed training with uneven inputs using the Join context manager](https://pytorch.org/tutorials/advanced/generic_join.html): the tutorial behind this chapter's `Join` section, with `ZeroRedundancyOptimizer`.
# - [`tarfile`](https://docs.python.org/3/library/tarfile.html): the stream mode (`"r|"`) and the member offsets that the reader and the resume use.
# - [WebDataset](https://github.com/webdataset/webdataset): the shard convention, `split_by_node`/`split_by_worker` and `with_epoch`.
#
# ## Exercises
# 1. With the 15 training shards on 2 ranks, call `plan(num_workers=8)`. Why does `equalize="pad"` refuse, and what does `"drop"` do instead? How many shards would you write for 8 GPUs with 4 workers each?
# 2. Re-run the shuffle measurement with shards written in CSV (random) order. How large must the buffer be now?
# 3. Add a `--persistent-workers` flag to `common/shards/train.py` and show that `set_epoch` no longer changes the order. Why?
# 4. Train from `webdataset` with `wds.split_by_node`, `wds.split_by_worker` and `.with_epoch(n)`: what plays the role of `equalize` there?
# 5. Give `common/shards/train.py` a one-cycle learning-rate schedule (as `common.ddp.train --schedule onecycle` has) and compare the last epochs' validation accuracy with this run's.
# 6. In `uneven.py`, sum the loss over the ranks with `dist.all_reduce(loss.detach())` inside `train` (a metric) and rerun the launch. What happens inside `Join`, and why?

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. Why does a map-style dataset that opens one file per sample stop working at scale, and what does streaming shards change?
# 2. What is inside one of the chapter's shards and its manifest, and why are the tar members written with fixed metadata?
# 3. With DDP and DataLoader workers, who reads which shard, and why does `ShardedImageDataset` deal a new permutation every epoch?
# 4. Why must every rank run the same number of batches under DDP, and what happened in `uneven.py` when they did not?
# 5. 15 shards of 64 samples on 2 ranks give 512 and 448 samples. What do `equalize="pad"`, `"drop"` and `"none"` do with that, and when is each used?
# 6. What does DDP's `Join` do with uneven batch counts, and where does it stop helping?
# 7. How well does a shuffle buffer mix a stream written in class order, and what is the rule of thumb?
# 8. What does `ShardedImageDataset` refuse when it reads a shard, and what catches a single flipped byte?
# 9. The chapter's shards are WebDataset shards. What does the `webdataset` library give you, and what does it leave to you?
