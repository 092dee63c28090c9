# %% [markdown]
# # Chapter 4 exercises — Distributed training with DDP
# **Guide sections:** beyond the guide (it breaks off in §2.3.1); builds on §2.2.1 Dataset与DataLoader类, toward the title's 分布式训练
# [Glossary / 术语表](../../../GLOSSARY.md)
# ## What you will learn
# - How `DistributedSampler` splits a dataset across ranks, and debugging a `torchrun` script from what it prints.
# - What DDP's all-reduce does to gradients, simulated in one process.
# - Snapshots that are written atomically and resume a run exactly.
# - Gradient accumulation that equals the full-batch step, even with an uneven last micro-batch.
# - Debugging a device choice from bug reports of machines you do not have (the device plan, simulated).
#
# Six exercises, 12 points, from warm-up to challenging. They accompany the DDP chapter (04). Exercise 2
# runs a script on 2 processes with `torchrun`; the rest runs in this one process: the functions are the
# pieces a `torchrun` script is made of.

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
# Some answers are files, not cells: the exercise names the script in `ex04_work/` (beside this notebook)
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
# `make grade-me NOTEBOOK=chapters/exercises/ex04_distributed_training.ipynb` (or
# `python -m course.grading --self chapters/exercises/ex04_distributed_training.ipynb`): it grades this notebook where it
# is, with its answer files, and prints the points of each exercise with the message of each failing check
# (`build/grade-me/report/feedback/me/` holds this notebook with a message under each check cell). It runs
# your answers in a sandbox where bubblewrap works (`make system-deps` installs it), and otherwise as trusted
# work, since they are your own, and says so. The solutions and the hidden checks are kept apart, in the
# instructor version of this notebook, `chapters/exercises/solutions/ex04_distributed_training.ipynb`: open it once you have tried.
#
# The first cell imports what the exercises use, seeds the random generators, picks the device and
# makes a temporary working folder (Exercise 4 writes its snapshots there).

# %%
import copy
import os
import re
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DistributedSampler

from common import get_device, seed_everything
from common.ddp.launch import launch_env, torchrun_command
from common.source import show_file
from course.student.checks import checks, hints

seed_everything(0)
device = get_device()
workdir = Path(tempfile.mkdtemp(prefix="ex04-"))
WORK = Path("ex04_work")  # Exercise 2's scripts: broken_ddp.py and your answer, fixed_ddp.py
WORK.mkdir(exist_ok=True)
hint = hints("ex04_distributed_training")  # hint("ex2", 1): the first hint of Exercise 2
print(f"device {device}; temporary working folder {workdir.name}")

# %% [markdown]
# ## Exercise 1 — Splitting indices across ranks · 1 point · ★☆☆ · ~10 min
# Write `shard_indices(n, *, rank, world_size)` without using `DistributedSampler`: the indices rank
# `rank` reads from a dataset of `n` samples when nothing is shuffled. Every rank must get the same
# number of indices, so the list `0 .. n-1` is first padded by repeating it from its beginning
# (as often as needed) up to a multiple of `world_size`; rank `r` then takes every `world_size`-th index starting at `r`.

# %% nbgrader={"grade": false, "grade_id": "ex1-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def shard_indices(n: int, *, rank: int, world_size: int) -> list[int]:
    ### BEGIN SOLUTION
    padding = -(-n // world_size) * world_size - n
    indices = list(range(n))
    indices += (indices * (padding // n + 1))[:padding]  # may repeat the list more than once
    return indices[rank::world_size]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 1"):
    got = [shard_indices(10, rank=r, world_size=4) for r in range(4)]
    want = [list(DistributedSampler(range(10), num_replicas=4, rank=r, shuffle=False)) for r in range(4)]
    assert got == want, f"expected {want}, got {got}"
    got = [shard_indices(2, rank=r, world_size=5) for r in range(5)]
    assert got == [[0], [1], [0], [1], [0]], f"2 samples on 5 ranks: repeat the list as often as needed; got {got}"
### BEGIN HIDDEN TESTS
for n, world_size in ((1, 3), (7, 2), (12, 3), (5, 5), (3, 8)):
    for rank in range(world_size):
        want = list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False))
        assert shard_indices(n, rank=rank, world_size=world_size) == want, \
            f"n={n}, world_size={world_size}, rank={rank}: expected {want}"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — Debug a DDP script from what it prints · 2 points · ★★☆ · ~25 min
# The script below trains a tiny model on 64 samples with DDP, and runs without an error. Its author is not
# happy with what it prints: the log does not read like 3 epochs over a dataset of 64 samples trained by 2
# processes. It is the file `ex04_work/broken_ddp.py` beside this notebook; the next cell shows it, and the one
# after `run_ddp` runs it on 2 processes with `torchrun` (about 15 s on a 2-core laptop). Find out from the
# output what is wrong, then in the script why.

# %% tags=["demo"]
show_file(WORK / "broken_ddp.py")

# %% [markdown]
# `run_ddp` starts a script like that under `torchrun --standalone --nproc_per_node=2` and returns what
# the ranks printed. Read it as the author did: how many samples each epoch counts, which indices each
# epoch starts with, and which ranks say they saved `model.pt`. What would a correct run print?

# %%
def run_ddp(script: Path, out: Path, ranks: int = 2) -> str:
    if "NotImplementedError" in script.read_text():  # an unanswered exercise: no torchrun launch
        raise NotImplementedError(f"{script.name} still raises NotImplementedError")
    out.mkdir(parents=True, exist_ok=True)
    command = torchrun_command(str(script), ["--out", str(out)], nproc_per_node=ranks)
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=launch_env(threads=1),
                          check=False)
    if "NotImplementedError" in done.stderr:
        raise NotImplementedError(f"{script.name} still raises NotImplementedError")
    assert done.returncode == 0, f"{script.name} failed:\n{done.stderr[-1500:]}"
    return done.stdout

# %% tags=["demo"]
print(run_ddp(WORK / "broken_ddp.py", WORK / "broken"))

# %% [markdown]
# Your answer is a file: `ex04_work/fixed_ddp.py`, handed out as a copy of the broken script whose first line
# raises `NotImplementedError`. Open it (in JupyterLab: the file browser, `ex04_work`), delete that line, fix
# what makes the output wrong and save it; the check below runs it on 2 processes (about 15 s). What it must
# do: on 2 ranks, each epoch's printed count and accuracy cover all 64 samples, no two epochs start with the
# same batch, and `model.pt` is written once (with the line `rank 0: saved model.pt`). Keep the printed lines
# as they are. Chapter 4.1 shows every tool it takes; the hidden checks run it on 4 ranks too and compare the
# saved weights with those of a correct run. Stuck? `hint("ex2", 1)` in a cell of your own gives a nudge,
# `hint("ex2", 2)` and `hint("ex2", 3)` come closer to the answer.

# %% nbgrader={"grade": false, "grade_id": "ex2-answer", "locked": true, "schema_version": 3, "solution": false, "task": false} tags=["answer-file:ex04_work/fixed_ddp.py:ex04_work/broken_ddp.py"]
# Exercise 2's answer is the file ex04_work/fixed_ddp.py, not this cell: fix the script there and save it.
# (Grading takes that file from beside your notebook.)

# %% nbgrader={"grade": true, "grade_id": "ex2-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 2"):
    printed = run_ddp(WORK / "fixed_ddp.py", WORK / "fixed")
    epochs = re.findall(r"^epoch (\d+): (\d+) samples, accuracy [\d.]+, first indices (\[.*\])$", printed, re.M)
    assert len(epochs) == 3, f"expected one line per epoch from rank 0, got:\n{printed}"
    assert all(int(n) == 64 for _, n, _ in epochs), "each epoch covers all 64 samples: all_reduce the counts"
    assert len({first for _, _, first in epochs}) == 3, "two epochs start with the same batch: call sampler.set_epoch"
    saves = re.findall(r"^rank (\d+): saved model.pt$", printed, re.M)
    assert saves == ["0"], f"only rank 0 may save; saved by ranks {saves}"
### BEGIN HIDDEN TESTS
def _trained(ranks):
    """The weights a correct script saves after 3 epochs on `ranks` ranks, in one process."""
    torch.manual_seed(0)
    features = torch.randn(64, 4)
    labels = (features.sum(1) > 0).long()
    model = nn.Linear(4, 2)  # drawn right after the features, as in the script
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    samplers = [DistributedSampler(range(64), num_replicas=ranks, rank=r, shuffle=True, seed=0)
                for r in range(ranks)]
    for epoch in range(3):
        for sampler in samplers:
            sampler.set_epoch(epoch)
        shards = [list(sampler) for sampler in samplers]
        for start in range(0, len(shards[0]), 8):
            optimizer.zero_grad()
            losses = [nn.functional.cross_entropy(model(features[s[start:start + 8]]), labels[s[start:start + 8]])
                      for s in shards]
            (sum(losses) / ranks).backward()  # DDP: the mean of the ranks' gradients
            optimizer.step()
    return model.state_dict()


for ranks, folder in ((2, WORK / "fixed"), (4, WORK / "fixed4")):
    if ranks == 4:  # another world size: printed or saved numbers that were typed in are wrong
        run_ddp(WORK / "fixed_ddp.py", folder, ranks=4)
    state = torch.load(folder / "model.pt", weights_only=True)
    assert sorted(state) == ["bias", "weight"], "save the plain model (model.module.state_dict())"
    for name, value in _trained(ranks).items():
        assert torch.allclose(state[name], value, atol=1e-5), \
            f"the saved {name} is not what 3 epochs of DDP training on {ranks} ranks give"
assert "destroy_process_group" in (WORK / "fixed_ddp.py").read_text(), "leave the process group"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — What the all-reduce does · 2 points · ★☆☆ · ~10 min
# In DDP every rank computes gradients on its own part of the batch, and an all-reduce replaces each
# gradient by the mean over ranks. Simulate that in one process: write `average_gradients(replicas)`
# for a list of identical models after `backward()`, setting every parameter's `.grad` in every
# replica to the mean of that parameter's gradients over the replicas.

# %% nbgrader={"grade": false, "grade_id": "ex3-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def average_gradients(replicas: list[nn.Module]) -> None:
    ### BEGIN SOLUTION
    for params in zip(*(model.parameters() for model in replicas), strict=True):
        mean = torch.stack([p.grad for p in params]).mean(dim=0)
        for p in params:
            p.grad = mean.clone()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def replicas_after_backward(model, images, labels, world_size):
    """One copy of `model` per rank, each after backward on its equal share of the batch."""
    replicas = [copy.deepcopy(model) for _ in range(world_size)]
    for rank, replica in enumerate(replicas):
        part = slice(rank * len(images) // world_size, (rank + 1) * len(images) // world_size)
        nn.functional.cross_entropy(replica(images[part]), labels[part]).backward()
    return replicas


with checks("Exercise 3"):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    images, labels = torch.randn(8, 4), torch.randint(0, 3, (8,))
    replicas = replicas_after_backward(model, images, labels, world_size=2)
    average_gradients(replicas)
    nn.functional.cross_entropy(model(images), labels).backward()
    for replica in replicas:
        for p, q in zip(model.parameters(), replica.parameters(), strict=True):
            assert torch.allclose(p.grad, q.grad, atol=1e-6), \
                "after averaging, each replica holds the full-batch gradient"
### BEGIN HIDDEN TESTS
model.zero_grad()
replicas = replicas_after_backward(model, images[:6], labels[:6], world_size=3)
average_gradients(replicas)
nn.functional.cross_entropy(model(images[:6]), labels[:6]).backward()
for p, *qs in zip(model.parameters(), *(r.parameters() for r in replicas), strict=True):
    for q in qs:
        assert torch.allclose(p.grad, q.grad, atol=1e-6), "every replica must hold the mean (3 ranks)"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — Snapshots that resume exactly · 3 points · ★★☆ · ~20 min
# Write `save_snapshot(path, *, model, optimizer, epoch, step)` and
# `load_snapshot(path, *, model, optimizer)`. Saving must be atomic: write to a temporary file in
# the same folder, then `os.replace` it onto `path`, so that a crash (or an error) while saving never
# damages the previous snapshot, and leave no temporary file behind, even when saving fails. Loading
# uses `torch.load(..., weights_only=True)`, restores the model *and the optimizer* (momentum!), and
# returns `(epoch, step)`; with no file at `path` it changes nothing and returns `(0, 0)`.

# %% nbgrader={"grade": false, "grade_id": "ex4-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def save_snapshot(path, *, model, optimizer, epoch: int, step: int) -> None:
    ### BEGIN SOLUTION
    path = Path(path)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "epoch": epoch, "step": step}
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    ### END SOLUTION


def load_snapshot(path, *, model, optimizer) -> tuple[int, int]:
    ### BEGIN SOLUTION
    if not Path(path).exists():
        return 0, 0
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"]), int(state["step"])
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def make_run(seed):
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def take_steps(model, optimizer, batches):
    for images, labels in batches:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()


with checks("Exercise 4"):
    torch.manual_seed(1)
    batches = [(torch.randn(4, 3), torch.randint(0, 2, (4,))) for _ in range(6)]
    straight, straight_opt = make_run(0)
    take_steps(straight, straight_opt, batches)
    first, first_opt = make_run(0)
    take_steps(first, first_opt, batches[:3])
    snapshot = workdir / "snapshot.pt"
    save_snapshot(snapshot, model=first, optimizer=first_opt, epoch=1, step=3)
    resumed, resumed_opt = make_run(123)  # a fresh process after the crash
    assert load_snapshot(snapshot, model=resumed, optimizer=resumed_opt) == (1, 3), "return (epoch, step)"
    take_steps(resumed, resumed_opt, batches[3:])
    for p, q in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6), "the resumed run differs: restore the optimizer too"
    fresh, fresh_opt = make_run(5)
    before = [p.detach().clone() for p in fresh.parameters()]
    assert load_snapshot(workdir / "missing.pt", model=fresh, optimizer=fresh_opt) == (0, 0), \
        "with no file at path, return (0, 0)"
    assert all(torch.equal(p, b) for p, b in zip(fresh.parameters(), before, strict=True)), \
        "with no file at path, change nothing"

    class BrokenOptimizer:
        def state_dict(self):
            return {"not saveable": (i for i in range(3))}  # a generator: saving fails half-way

    try:
        save_snapshot(snapshot, model=first, optimizer=BrokenOptimizer(), epoch=9, step=9)
    except Exception:  # noqa: BLE001 - any error is fine, as long as the old snapshot survives
        pass
    check, check_opt = make_run(6)
    assert load_snapshot(snapshot, model=check, optimizer=check_opt) == (1, 3), \
        "a failed save damaged the previous snapshot: write a temporary file, then os.replace"
    assert sorted(p.name for p in workdir.iterdir()) == ["snapshot.pt"], \
        f"temporary files were left behind: {sorted(p.name for p in workdir.iterdir())}"
### BEGIN HIDDEN TESTS
other = workdir / "other"
other.mkdir()
second, second_opt = make_run(7)
save_snapshot(other / "run.pt", model=second, optimizer=second_opt, epoch=2, step=5)
save_snapshot(other / "run.pt", model=first, optimizer=first_opt, epoch=3, step=7)  # over an older one
check, check_opt = make_run(8)
assert load_snapshot(other / "run.pt", model=check, optimizer=check_opt) == (3, 7), "a new save replaces the old one"
for p, q in zip(first.parameters(), check.parameters(), strict=True):
    assert torch.equal(p, q), "the newest snapshot's model"


class BrokenModel(nn.Linear):
    def state_dict(self, *args, **kwargs):
        raise RuntimeError("cannot save")  # fails before anything is written


try:
    save_snapshot(other / "run.pt", model=BrokenModel(3, 2), optimizer=first_opt, epoch=9, step=9)
except Exception:  # noqa: BLE001 - any error is fine, as long as the old snapshot survives
    pass
assert load_snapshot(other / "run.pt", model=check, optimizer=check_opt) == (3, 7), \
    "a failed save damaged the previous snapshot"
assert sorted(p.name for p in other.iterdir()) == ["run.pt"], \
    f"temporary files were left behind: {sorted(p.name for p in other.iterdir())}"
missing, missing_opt = make_run(9)
assert load_snapshot(other / "none" / "x.pt", model=missing, optimizer=missing_opt) == (0, 0)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — Gradient accumulation that equals the big batch · 2 points · ★★☆ · ~15 min
# Write `accumulated_step(model, optimizer, images, labels, *, micro_batch)`: zero the gradients,
# run the batch in micro-batches of `micro_batch` samples (the last one may be smaller), call
# `backward()` once per micro-batch, then take a single `optimizer.step()`. The result must equal one
# step on the whole batch with the mean cross-entropy loss, so weight each micro-batch's loss by its
# share of the samples (dividing by the number of micro-batches is only right when all are equal).

# %% nbgrader={"grade": false, "grade_id": "ex5-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def accumulated_step(model, optimizer, images, labels, *, micro_batch: int) -> None:
    ### BEGIN SOLUTION
    optimizer.zero_grad()
    for start in range(0, len(images), micro_batch):
        chunk = slice(start, start + micro_batch)
        loss = nn.functional.cross_entropy(model(images[chunk]), labels[chunk], reduction="sum")
        (loss / len(images)).backward()
    optimizer.step()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def compare_with_full_batch(n, micro_batch):
    torch.manual_seed(2)
    images, labels = torch.randn(n, 5), torch.randint(0, 3, (n,))
    big = nn.Linear(5, 3)
    small = copy.deepcopy(big)
    big_opt = torch.optim.SGD(big.parameters(), lr=0.5)
    small_opt = torch.optim.SGD(small.parameters(), lr=0.5)
    big_opt.zero_grad()
    nn.functional.cross_entropy(big(images), labels).backward()
    big_opt.step()
    for p in small.parameters():
        p.grad = torch.ones_like(p)  # left over from an earlier step: accumulated_step zeroes them first
    accumulated_step(small, small_opt, images, labels, micro_batch=micro_batch)
    return all(torch.allclose(p, q, atol=1e-6) for p, q in zip(big.parameters(), small.parameters(), strict=True))


with checks("Exercise 5"):
    assert compare_with_full_batch(8, 4), "two equal micro-batches must give the full-batch step"
    assert compare_with_full_batch(10, 4), \
        "the last micro-batch may be smaller: micro-batches of 4, 4 and 2 must give the full-batch step"
### BEGIN HIDDEN TESTS
assert compare_with_full_batch(5, 1), "five micro-batches of one must give the full-batch step"
assert compare_with_full_batch(11, 3), "micro-batches of 3, 3, 3 and 2 must give the full-batch step"
assert compare_with_full_batch(3, 8), "one micro-batch larger than the batch must give the full-batch step"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 — Debug a device choice from four bug reports · 2 points · ★★★ · ~25 min
# A learner's training script picks its device with the function below. It worked on their workstation
# with 2 GPUs (`torchrun --standalone --nproc_per_node=2 train.py`). Then four reports came in:
#
# 1. Two such workstations, `torchrun --nnodes=2 --nproc_per_node=2 ...`: ranks 2 and 3 stop at start with
#    `CUDA error: invalid device ordinal`.
# 2. A Colab notebook with one GPU, `torchrun --standalone --nproc_per_node=2 train.py`: NCCL stops the
#    job with `Duplicate GPU detected : rank 1 and rank 0 both on CUDA device ...`.
# 3. A Mac, `torchrun --standalone --nproc_per_node=2 train.py`: DDP's first broadcast of the weights
#    fails with `No backend type associated with device type mps`.
# 4. The same script started as `python train.py` for a quick try: `KeyError: 'RANK'`.
#
# `env` holds the variables the process sees (`os.environ`; torchrun sets `RANK`, `LOCAL_RANK`,
# `WORLD_SIZE` and `LOCAL_WORLD_SIZE`, all strings); `cuda_count` and `mps` are what the machine has.

# %%
def buggy_pick_device(env: dict[str, str], *, cuda_count: int, mps: bool) -> tuple[str, str]:
    """(device, backend) of the rank that ``env`` describes."""
    rank = int(env["RANK"])
    if cuda_count > 0:
        return f"cuda:{rank}", "nccl"
    if mps:
        return "mps", "gloo"
    return "cpu", "gloo"


print(buggy_pick_device({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
                        cuda_count=2, mps=False), "on the 2-GPU workstation, rank 1")

# %% [markdown]
# Write `pick_device(env, *, cuda_count, mps)`, a fixed version with the same arguments and results (two
# strings: the device, `"cuda:N"`, `"mps"` or `"cpu"`, and the backend, `"nccl"` or `"gloo"`). What it
# must do, on every machine: where the machine has a GPU for each of the ranks started on it, each of
# them gets a GPU of its own with NCCL, as on the workstation; otherwise all the ranks of the job compute
# on the CPU with gloo; a process that is not part of a job keeps the best device it has (a GPU, else
# MPS, else the CPU). Read only `env` and the two counts (the checks describe machines that are not this
# one), and leave `env` as it is. Chapter 4.1's device plan shows every tool it takes; the hidden checks
# try it on more machines than the four.

# %% nbgrader={"grade": false, "grade_id": "ex6-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def pick_device(env: dict[str, str], *, cuda_count: int, mps: bool) -> tuple[str, str]:
    ### BEGIN SOLUTION
    if "RANK" not in env:  # plain python: a process alone, in no process group
        if cuda_count > 0:
            return "cuda:0", "nccl"
        return ("mps", "gloo") if mps else ("cpu", "gloo")
    local_rank, ranks_here = int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
    if cuda_count >= ranks_here:  # one GPU per rank on this machine: the slot is the local rank
        return f"cuda:{local_rank}", "nccl"
    return "cpu", "gloo"  # too few GPUs for NCCL, or a Mac: gloo runs no collectives on MPS tensors
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex6-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def job_env(rank: int, *, nodes: int, per_node: int) -> dict[str, str]:
    """What torchrun gives global rank ``rank`` of ``nodes`` machines x ``per_node`` ranks."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank % per_node), "WORLD_SIZE": str(nodes * per_node),
            "LOCAL_WORLD_SIZE": str(per_node)}


def job(*, nodes: int, per_node: int, cuda_count: int, mps: bool = False) -> list[tuple[str, str]]:
    return [tuple(pick_device(job_env(r, nodes=nodes, per_node=per_node), cuda_count=cuda_count, mps=mps))
            for r in range(nodes * per_node)]


with checks("Exercise 6"):
    workstation = job(nodes=1, per_node=2, cuda_count=2)
    assert workstation == [("cuda:0", "nccl"), ("cuda:1", "nccl")], f"the workstation gets {workstation}"
    two = job(nodes=2, per_node=2, cuda_count=2)
    assert [d for d, _ in two] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"], f"report 1: two workstations get {two}"
    colab = job(nodes=1, per_node=2, cuda_count=1)
    assert colab == [("cpu", "gloo")] * 2, f"report 2: 2 ranks on 1 GPU get {colab}"
    mac = job(nodes=1, per_node=2, cuda_count=0, mps=True)
    assert mac == [("cpu", "gloo")] * 2, f"report 3: 2 ranks on a Mac get {mac}"
    alone = tuple(pick_device({}, cuda_count=0, mps=False))
    assert alone == ("cpu", "gloo"), f"report 4: plain python on a machine without GPU gets {alone}"
    assert tuple(pick_device({}, cuda_count=1, mps=False)) == ("cuda:0", "nccl"), \
        "plain python on a machine with a GPU keeps the GPU"
    assert tuple(pick_device({}, cuda_count=0, mps=True)) == ("mps", "gloo"), "plain python on a Mac keeps MPS"
    env = job_env(1, nodes=1, per_node=2)
    pick_device(env, cuda_count=2, mps=False)
    assert env == job_env(1, nodes=1, per_node=2), "leave env as it is"
### BEGIN HIDDEN TESTS
from common.device import plan_device


def planned(env: dict[str, str], cuda_count: int, mps: bool) -> tuple[str, str]:
    world = int(env.get("WORLD_SIZE", "1"))
    plan = plan_device(rank=int(env.get("RANK", "0")), local_rank=int(env.get("LOCAL_RANK", "0")),
                       local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world))), world_size=world,
                       cuda_count=cuda_count, mps=mps, forced=None, in_group="RANK" in env)
    return str(plan.device), plan.backend


assert tuple(pick_device({}, cuda_count=4, mps=False)) == ("cuda:0", "nccl"), \
    "plain python on a machine with GPUs keeps the first GPU"
one_rank_mac = tuple(pick_device(job_env(0, nodes=1, per_node=1), cuda_count=0, mps=True))
assert one_rank_mac == ("cpu", "gloo"), \
    f"torchrun --nproc_per_node=1 on a Mac joins a gloo group, which needs CPU tensors: got {one_rank_mac}"
assert job(nodes=1, per_node=2, cuda_count=4) == [("cuda:0", "nccl"), ("cuda:1", "nccl")], \
    "more GPUs than ranks: each rank still gets its own GPU"
mixed = job(nodes=1, per_node=4, cuda_count=3)
assert mixed == [("cpu", "gloo")] * 4, f"3 GPUs for 4 ranks: the whole job on the CPU (one backend), got {mixed}"
for nodes in (1, 2, 3):
    for per_node in (1, 2, 3):
        for cuda_count, mps in ((0, False), (0, True), (1, False), (2, False), (3, False), (8, False)):
            for rank in range(nodes * per_node):
                env = job_env(rank, nodes=nodes, per_node=per_node)
                before = dict(env)
                got = tuple(pick_device(env, cuda_count=cuda_count, mps=mps))
                want = planned(env, cuda_count, mps)
                assert env == before, "leave env as it is"
                assert got == want, (f"rank {rank} of {nodes} machine(s) x {per_node} rank(s), {cuda_count} GPU(s)"
                                     f"{', MPS' if mps else ''}: got {got}, expected {want}")
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
# - `DistributedSampler` pads to equal shares; `set_epoch(epoch)` gives each epoch a new order.
# - DDP's all-reduce turns per-rank gradients into their mean: the same as one big batch.
# - Atomic snapshots: temporary file in the same folder, `fsync`, `os.replace`; restore the optimizer too.
# - Accumulation weights each micro-batch by its share of the samples.
# - A rank's GPU is its `LOCAL_RANK` on a machine with a GPU per local rank; otherwise the whole job uses the CPU and gloo.
#
# ## Exercises
# Further practice, not graded: put these pieces into a `torchrun` script with two CPU processes
# (`gloo`) and check that its weights match a one-process run (see `common.ddp.train`).
