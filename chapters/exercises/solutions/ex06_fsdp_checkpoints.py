# %% [markdown]
# # Chapter 6 exercises — Sharding and distributed checkpoints
# **Guide sections:** beyond the guide (large-scale training, continues §2.1 数据管道的概念与重要性)
# [Glossary / 术语表](../../../GLOSSARY.md)
# ## What you will learn
# - What each rank holds under DDP and under ZeRO stages 1–3.
# - How FSDP's `Shard(0)` splits a parameter's rows across ranks, and how a checkpoint is resharded.
# - Publishing a checkpoint atomically, and finding the newest complete one.
# - Debugging, from what the ranks print, a checkpoint that a job on another number of processes cannot load.
# - Resuming a `StatefulDataLoader` with workers to the same batches, across epochs.
# - Wrapping a model for FSDP2 by a size rule, and checking its DTensor placements and weights on 2 ranks.
# - Debugging a job that loses one of its two elastic agents and must go on at world size 1.
#
# Nine exercises, 22 points, from warm-up to challenging. They accompany the chapter 6 notebooks (06_1–06_4);
# Exercises 6, 8 and 9 start processes with `torchrun`, Exercise 7 DataLoader workers.

# %% [markdown]
# ## How these exercises work (beyond the guide)
# Write your code in the cells that say `# YOUR CODE HERE` (replace the `raise NotImplementedError()`
# or the `...`), run that cell, then run the check cell below it. A check cell prints
# "not yet done" until you have answered, and fails with a message when something is wrong.
# When your work is graded, each check cell runs again together with hidden checks, and only the
# answer cells of your notebook are used: keep all of an exercise's code in its answer cell.
# Your answers then run in a process of their own, and the checks see only what your functions
# return and what they do to their arguments: return plain values (numbers, strings, tensors,
# arrays, lists of them), not objects of a class of your own that stand in for them.
#
# Some answers are files, not cells: the exercise names the script in `ex06_work/` (beside this notebook)
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
# `make grade-me NOTEBOOK=chapters/exercises/ex06_fsdp_checkpoints.ipynb` (or
# `python -m course.grading --self chapters/exercises/ex06_fsdp_checkpoints.ipynb`): it grades this notebook where it
# is, with its answer files, and prints the points of each exercise with the message of each failing check
# (`build/grade-me/report/feedback/me/` holds this notebook with a message under each check cell). It runs
# your answers in a sandbox where bubblewrap works (`make system-deps` installs it), and otherwise as trusted
# work, since they are your own, and says so. The solutions and the hidden checks are kept apart, in the
# instructor version of this notebook, `chapters/exercises/solutions/ex06_fsdp_checkpoints.ipynb`: open it once you have tried.
#
# The first cell imports what the exercises use, seeds the random generators, picks the device and
# makes a temporary working folder.

# %%
import tempfile
from pathlib import Path

import torch

from common import get_device, seed_everything
from common.source import show_file
from course.student.checks import checks, hints

seed_everything(0)
device = get_device()
workdir = Path(tempfile.mkdtemp(prefix="ex06-"))
WORK = Path("ex06_work")  # the scripts of Exercises 6, 8 and 9, and your answer files
WORK.mkdir(exist_ok=True)
hint = hints("ex06_fsdp_checkpoints")  # hint("ex6", 1): the first hint of Exercise 6
print(f"device {device}; working folder {workdir.name}")

# %% [markdown]
# ## Exercise 1 — Bytes per rank (beyond the guide) · 1 point · ★☆☆ · ~10 min
# Training in float32 with AdamW keeps per parameter 4 bytes of parameter, 4 of gradient and 8 of
# optimizer state. Write `zero_bytes(num_params, *, world_size, stage)` returning the bytes per rank:
# stage 0 is DDP (nothing sharded); stage 1 divides the optimizer state by `world_size`, stage 2 also
# the gradients, stage 3 also the parameters. Return a float.

# %% nbgrader={"grade": false, "grade_id": "ex1-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def zero_bytes(num_params: int, *, world_size: int, stage: int) -> float:
    ### BEGIN SOLUTION
    parts = (8, 4, 4)  # optimizer state, gradients, parameters: sharded in this order
    return float(num_params * sum(b / world_size if i < stage else b for i, b in enumerate(parts)))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 1"):
    assert zero_bytes(1_000, world_size=4, stage=0) == 16_000, "DDP: 16 bytes per parameter"
    assert zero_bytes(1_000, world_size=4, stage=1) == 1_000 * (4 + 4 + 2), "ZeRO-1 divides the optimizer state"
    assert zero_bytes(1_000, world_size=4, stage=2) == 1_000 * (4 + 1 + 2), "ZeRO-2 divides the gradients too"
    assert zero_bytes(1_000, world_size=4, stage=3) == 4_000, "ZeRO-3 divides everything"
    assert type(zero_bytes(1_000, world_size=4, stage=0)) is float, "return a float"
### BEGIN HIDDEN TESTS
assert zero_bytes(1_000, world_size=2, stage=1) == 1_000 * (4 + 4 + 4)
assert zero_bytes(1_000, world_size=8, stage=2) == 1_000 * (4 + 0.5 + 1)
assert zero_bytes(3, world_size=3, stage=3) == 16.0
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — `Shard(0)` by hand (beyond the guide) · 2 points · ★☆☆ · ~10 min
# FSDP2 splits every parameter along dimension 0 the way `torch.chunk` does: each rank gets
# `ceil(rows / world_size)` rows, the last ranks fewer (possibly none). Write
# `local_shard(tensor, *, rank, world_size)` returning rank `rank`'s rows (an empty tensor with the
# remaining dimensions when it gets none).

# %% nbgrader={"grade": false, "grade_id": "ex2-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def local_shard(tensor: torch.Tensor, *, rank: int, world_size: int) -> torch.Tensor:
    ### BEGIN SOLUTION
    per_rank = -(-tensor.shape[0] // world_size)
    return tensor[rank * per_rank:(rank + 1) * per_rank]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 2"):
    weight = torch.arange(12.0).reshape(6, 2)
    assert local_shard(weight, rank=1, world_size=2).tolist() == [[6, 7], [8, 9], [10, 11]]
    assert local_shard(weight, rank=3, world_size=4).shape == (0, 2), "the last rank gets no rows"
    odd = torch.arange(14.0).reshape(7, 2)
    assert [local_shard(odd, rank=r, world_size=2).shape[0] for r in range(2)] == [4, 3], \
        "7 rows on 2 ranks: ceil(7 / 2) = 4 rows, the last rank fewer"
### BEGIN HIDDEN TESTS
for rows in (1, 5, 7, 64):
    for world_size in (1, 2, 3, 4):
        tensor = torch.randn(rows, 3)
        parts = [local_shard(tensor, rank=r, world_size=world_size) for r in range(world_size)]
        assert torch.equal(torch.cat(parts), tensor), (rows, world_size)
        chunks = torch.chunk(tensor, world_size)
        assert all(torch.equal(p, c) for p, c in zip(parts, chunks, strict=False))
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — Resharding (beyond the guide) · 2 points · ★★☆ · ~15 min
# A checkpoint written by `old_world_size` ranks holds one row-shard per rank. Loading on
# `new_world_size` ranks, each new rank needs the rows its own shard covers. Write
# `reshard(shards, new_world_size)` taking the old ranks' shards (a list, in rank order) and returning
# the new ranks' shards — use your `local_shard`. (DCP does this piecewise, reading only the byte ranges
# each rank needs; here the whole tensor may be rebuilt in memory.)

# %% nbgrader={"grade": false, "grade_id": "ex3-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def reshard(shards: list[torch.Tensor], new_world_size: int) -> list[torch.Tensor]:
    ### BEGIN SOLUTION
    full = torch.cat(shards)
    return [local_shard(full, rank=r, world_size=new_world_size) for r in range(new_world_size)]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 3"):
    weight = torch.arange(14.0).reshape(7, 2)
    two = [local_shard(weight, rank=r, world_size=2) for r in range(2)]
    three = reshard(two, 3)
    assert [s.shape[0] for s in three] == [3, 3, 1], [s.shape for s in three]
    assert torch.equal(torch.cat(three), weight)
### BEGIN HIDDEN TESTS
one = reshard(three, 1)
assert len(one) == 1 and torch.equal(one[0], weight)
assert torch.equal(torch.cat(reshard(reshard(two, 5), 2)), weight)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — Publish a checkpoint atomically (beyond the guide) · 2 points · ★★☆ · ~15 min
# Write `save_atomically(state, root, step)`: `torch.save(state, ...)` into a file `state.pt` inside a
# hidden temporary folder `root/.step-NNNNNN.tmp` (6 digits; remove one left by an earlier killed
# writer first), then rename the folder to `root/step-NNNNNN` and return that path. Create `root`
# if needed. If a `step-NNNNNN` already exists, raise `FileExistsError` and leave it untouched.

# %% nbgrader={"grade": false, "grade_id": "ex4-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def save_atomically(state: dict, root, step: int) -> Path:
    ### BEGIN SOLUTION
    import shutil

    root = Path(root)
    final, tmp = root / f"step-{step:06d}", root / f".step-{step:06d}.tmp"
    if final.exists():
        raise FileExistsError(f"{final} exists")
    root.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(state, tmp / "state.pt")
    tmp.rename(final)
    return final
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 4"):
    root = workdir / "atomic"
    (root / ".step-000002.tmp").mkdir(parents=True)  # left by a killed writer
    (root / ".step-000002.tmp" / "junk").write_text("partial")
    path = save_atomically({"w": torch.ones(2)}, root, 2)
    assert path == root / "step-000002" and sorted(p.name for p in root.iterdir()) == ["step-000002"]
    assert sorted(p.name for p in path.iterdir()) == ["state.pt"]
    assert torch.equal(torch.load(path / "state.pt")["w"], torch.ones(2))
    try:
        save_atomically({"w": torch.zeros(2)}, root, 2)
        raise AssertionError("an existing checkpoint must not be overwritten: raise FileExistsError")
    except FileExistsError:
        pass
    assert torch.equal(torch.load(root / "step-000002" / "state.pt")["w"], torch.ones(2)), \
        "an existing checkpoint must stay untouched"
    assert save_atomically({}, workdir / "new", 17) == workdir / "new" / "step-000017", "create root if needed"
### BEGIN HIDDEN TESTS
assert save_atomically({}, workdir / "other" / "deeper", 123456).name == "step-123456"
(root / ".step-000005.tmp").mkdir()  # left by a killed writer
try:
    save_atomically({"w": torch.zeros(2)}, root, 2)
    raise AssertionError("an existing checkpoint must not be overwritten")
except FileExistsError:
    pass
assert torch.equal(torch.load(root / "step-000002" / "state.pt")["w"], torch.ones(2))
assert save_atomically({"w": torch.zeros(3)}, root, 5) == root / "step-000005"
assert sorted(p.name for p in (root / "step-000005").iterdir()) == ["state.pt"]
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — The newest complete checkpoint (beyond the guide) · 3 points · ★★☆ · ~20 min
# A checkpoint folder holds `step-NNNNNN` folders (complete when they contain a `.metadata` file),
# hidden `.step-NNNNNN.tmp` folders, and other files. Write `newest_complete(root)`: the complete
# `step-NNNNNN` folder with the highest step number (as a number: `step-1000000` is newer than
# `step-999999`), or `None` when there is none or `root` does not exist. Skip incomplete folders.

# %% nbgrader={"grade": false, "grade_id": "ex5-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def newest_complete(root) -> Path | None:
    ### BEGIN SOLUTION
    import re

    root = Path(root)
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := re.fullmatch(r"step-(\d+)", p.name)) and (p / ".metadata").is_file()]
    return max(found)[1] if found else None
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def folder(root: Path, name: str, complete: bool = True) -> None:
    (root / name).mkdir(parents=True)
    if complete:
        (root / name / ".metadata").write_bytes(b"x")


with checks("Exercise 5"):
    root = workdir / "newest"
    folder(root, "step-000004")
    folder(root, "step-000008")
    folder(root, ".step-000012.tmp")
    (root / "notes.txt").write_text("another file")
    assert newest_complete(root) == root / "step-000008"
    folder(root, "step-000010", complete=False)
    assert newest_complete(root) == root / "step-000008", "a folder without .metadata is incomplete"
    folder(root, "step-999999")
    folder(root, "step-1000000")
    assert newest_complete(root) == root / "step-1000000", "compare step numbers as numbers"
    assert newest_complete(workdir / "nowhere") is None, "a root that does not exist has none"
### BEGIN HIDDEN TESTS
(root / "step-2000000").write_text("a file, not a folder")
folder(root, "step-1000001", complete=False)
assert newest_complete(root) == root / "step-1000000"
empty = workdir / "empty"
empty.mkdir()
assert newest_complete(empty) is None
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 — Debug a checkpoint that does not survive a new world size (beyond the guide) · 3 points · ★★☆ · ~30 min
# The script below trains a small model with FSDP2 on 2 processes for 3 steps and writes a checkpoint; run
# again with `--resume`, it loads that checkpoint and trains 3 more steps. It is meant to continue on *any*
# number of processes — a job that lost or gained a machine (chapters 6.2 and 6.4). Resumed on 2 processes
# it seems to work. It is the file `ex06_work/resume_fsdp.py` beside this notebook; the next cell shows it, and
# the demo after `run_fsdp` runs it on 2 processes, then resumes it on 3 (about 20 s on a 2-core laptop), and
# prints what the ranks printed. Read the output as its author
# did: what happened on 3 processes, and which ranks say they wrote `final.pt`?

# %% tags=["demo"]
show_file(WORK / "resume_fsdp.py")

# %% [markdown]
# `run_fsdp` starts a script like that under `torchrun --standalone` on `ranks` processes, with
# `--checkpoint` and `--out`, and returns the finished process (exit code, what the ranks printed).
# `one_process(steps)` is what the training must give: the same model and batch, trained in one process.

# %%
import re
import shutil
import subprocess

from torch import nn

from common.ddp.launch import launch_env, torchrun_command


def run_fsdp(script: Path, folder: Path, ranks: int, *extra: str) -> subprocess.CompletedProcess:
    """``script --checkpoint folder/ckpt --out folder/final.pt`` on ``ranks`` processes, finished."""
    if "NotImplementedError" in script.read_text():  # an unanswered exercise: no torchrun launch
        raise NotImplementedError(f"{script.name} still raises NotImplementedError")
    args = ["--checkpoint", str(folder / "ckpt"), "--out", str(folder / "final.pt"), *extra]
    command = torchrun_command(str(script), args, nproc_per_node=ranks)
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=launch_env(threads=1),
                          check=False)
    if "NotImplementedError" in done.stderr:
        raise NotImplementedError(f"{script.name} still raises NotImplementedError")
    return done


def one_process(steps: int) -> dict[str, torch.Tensor]:
    """The weights after ``steps`` SGD steps of the script's model on its batch, in one process."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    generator = torch.Generator().manual_seed(1)
    inputs, targets = torch.randn(12, 8, generator=generator), torch.randn(12, 4, generator=generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    return model.state_dict()

# %% tags=["parameters"]
# The world sizes of the demo below: the first run's, then the resumed run's. `make test` runs it with
# smaller ones (tests/notebook_parameters.py).
FIRST_RANKS = 2
RESUMED_RANKS = 3

# %% tags=["demo"]
shutil.rmtree(WORK / "broken", ignore_errors=True)  # a fresh start
first = run_fsdp(WORK / "resume_fsdp.py", WORK / "broken", FIRST_RANKS)
print(first.stdout)
again = run_fsdp(WORK / "resume_fsdp.py", WORK / "broken", RESUMED_RANKS, "--resume")
print(f"resumed on {RESUMED_RANKS} processes: exit code {again.returncode}")
errors = re.findall(r"FileNotFoundError: .*|Cannot run .*? different meshes: got DeviceMesh\(\(\d+,\).*?\)\) and "
                    r"DeviceMesh\(\(\d+,\).*?\)\)", again.stderr)  # whichever ranks failed first
print(*sorted(set(errors)), sep="\n")
assert first.returncode == 0 and again.returncode != 0 and errors

# %% [markdown]
# Your answer is a file: `ex06_work/fixed_fsdp.py`, handed out as a copy of the script whose first line raises
# `NotImplementedError`. Delete that line and fix what the output shows; the check below runs it on 2
# processes and resumes it on 3 (about 20 s). What it must do: resumed on 3 (or any number of) processes it
# goes on from step 3 to the weights that 6 steps in one process give, and `final.pt` is written once (with one
# line `rank 0: step …`). Keep the printed lines, the arguments and the `step-3`/`step-6` folders. Mind which
# calls are collectives: every rank must make them. Chapters 6.1 and 6.2 show every tool it takes; the hidden
# checks look at what the checkpoints hold (one distributed checkpoint per step, written by all the ranks).
# Stuck? `hint("ex6", 1)` in a cell of your own, then `hint("ex6", 2)` and `hint("ex6", 3)`.

# %% nbgrader={"grade": false, "grade_id": "ex6-answer", "locked": true, "schema_version": 3, "solution": false, "task": false} tags=["answer-file:ex06_work/fixed_fsdp.py:ex06_work/resume_fsdp.py"]
# Exercise 6's answer is the file ex06_work/fixed_fsdp.py, not this cell: fix the script there and save it.
# (Grading takes that file from beside your notebook.)

# %% nbgrader={"grade": true, "grade_id": "ex6-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 6"):
    shutil.rmtree(WORK / "fixed", ignore_errors=True)  # nothing left from an earlier try
    for ranks, extra, step in ((2, (), 3), (3, ("--resume",), 6)):
        done = run_fsdp(WORK / "fixed_fsdp.py", WORK / "fixed", ranks, *extra)
        assert done.returncode == 0, f"on {ranks} processes the script failed:\n{done.stderr[-1500:]}"
        lines = re.findall(r"^rank (\d+): step (\d+), loss [\d.]+, saved step-\d+ and final.pt$", done.stdout, re.M)
        assert [rank for rank, _ in lines] == ["0"], f"only rank 0 may write final.pt; on {ranks} processes: {lines}"
        assert lines[0][1] == str(step), f"on {ranks} processes the run should end at step {step}: {lines}"
    final = torch.load(WORK / "fixed" / "final.pt", weights_only=True)
    assert sorted(final) == sorted(one_process(0)), "final.pt holds the plain (full) state dict"
    for name, value in one_process(6).items():
        assert torch.allclose(final[name], value, atol=1e-5), \
            f"resumed on 3 processes, {name} is not what 6 steps in one process give"
    files = sorted(p.name for p in (WORK / "fixed" / "ckpt" / "step-6").iterdir())
    expected = [".metadata"] + [f"__{rank}_0.distcp" for rank in range(3)]
    assert files == expected, ("step-6 should be one distributed checkpoint that the 3 ranks wrote together "
                               f"(torch.distributed.checkpoint), holding {expected}; it holds {files}")
### BEGIN HIDDEN TESTS
for step, ranks in ((3, 2),):
    files = sorted(p.name for p in (WORK / "fixed" / "ckpt" / f"step-{step}").iterdir())
    expected = [".metadata"] + [f"__{rank}_0.distcp" for rank in range(ranks)]
    assert files == expected, (f"step-{step} should be one distributed checkpoint that {ranks} ranks wrote "
                               f"together (torch.distributed.checkpoint), holding {expected}; it holds {files}")
assert "destroy_process_group" in (WORK / "fixed_fsdp.py").read_text(), "leave the process group"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 7 — Resume to the same batches, across an epoch boundary (beyond the guide) · 3 points · ★★★ · ~30 min
# Chapter 6.3 resumed a `StatefulDataLoader` inside one epoch. A training job stops anywhere: in the middle
# of epoch 2 as well, and the resumed job must go on with the batches the uninterrupted job would have seen,
# epoch after epoch. Write `run_epochs(dataset, *, num_workers, epochs=2, stop_after=None, state=None)`:
# - it reads `epochs` epochs of `dataset` through a loader with batches of 4, shuffled by a generator seeded
#   with 0, with `num_workers` DataLoader workers, and returns `(batches, state)`: `batches` the batches it
#   read, each as a list of ints (the dataset yields one tensor per sample, so a batch is a 1-tuple);
# - with `stop_after=N` it stops right after its N-th batch and returns as `state` everything a new call
#   needs to go on from there (plain values only: it goes into a checkpoint); otherwise `state` is `None`;
# - with `state=` it goes on from where that state was taken, to the end of epoch `epochs`.
#
# The check stops runs of 2 epochs with 2 workers after 3 and after 13 batches (an epoch has 10) and
# compares the two halves with one uninterrupted run.

# %% nbgrader={"grade": false, "grade_id": "ex7-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def run_epochs(dataset, *, num_workers: int, epochs: int = 2, stop_after: int | None = None,
               state: dict | None = None) -> tuple[list[list[int]], dict | None]:
    ### BEGIN SOLUTION
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(dataset, batch_size=4, shuffle=True, num_workers=num_workers,
                                generator=torch.Generator().manual_seed(0))
    first = 0
    if state is not None:
        first = state["epoch"]  # the loader's state knows where it is in an epoch, not which epoch
        loader.load_state_dict(state["loader"])
    batches = []
    for epoch in range(first, epochs):
        for (batch,) in loader:
            batches.append(batch.tolist())
            if stop_after is not None and len(batches) == stop_after:
                return batches, {"epoch": epoch, "loader": loader.state_dict()}
    return batches, None
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex7-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
import pickle
import warnings

from torch.utils.data import TensorDataset

warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # called by torchdata 0.11

numbers = TensorDataset(torch.arange(40))
with checks("Exercise 7"):
    whole, none = run_epochs(numbers, num_workers=2)
    assert none is None and len(whole) == 20, f"2 epochs of 10 batches and no state, got {len(whole)} batches"
    assert sorted(sum(whole[:10], [])) == list(range(40)) and whole[:10] != whole[10:], \
        "each epoch reads all 40 numbers, in a new order"
    for stop in (3, 13):
        head, state = run_epochs(numbers, num_workers=2, stop_after=stop)
        assert len(head) == stop and state is not None, f"stop right after batch {stop} and return a state"
        tail, _ = run_epochs(numbers, num_workers=2, state=pickle.loads(pickle.dumps(state)))
        assert head + tail == whole, f"stopped after {stop} batches and resumed, the batches differ from one run"
### BEGIN HIDDEN TESTS
for workers, stop in ((1, 10), (2, 19)):
    whole, _ = run_epochs(numbers, num_workers=workers, epochs=3)
    head, state = run_epochs(numbers, num_workers=workers, epochs=3, stop_after=stop)
    tail, _ = run_epochs(numbers, num_workers=workers, epochs=3, state=pickle.loads(pickle.dumps(state)))
    assert head + tail == whole, f"{workers} workers, 3 epochs, stopped after {stop} batches: not one run's batches"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 8 — Wrap by size: an FSDP2 wrapping policy (beyond the guide) · 3 points · ★★★ · ~30 min
# Chapter 6.1 chose the units by hand: every block one `fully_shard`, then the root. Large models are
# wrapped by a rule instead, as FSDP1's `size_based_auto_wrap_policy` did: a module becomes a unit of its
# own once the parameters it would gather are many enough. Write that rule for FSDP2, in a module of its own
# (the file below) that defines `shard(model, *, min_params) -> list[str]`:
# - visit the submodules of `model` (not `model` itself) so that each one comes after every module
#   inside it;
# - a submodule becomes a unit (`fully_shard(module)`) when the parameters it holds, directly or in
#   submodules that are not units already, have at least `min_params` elements in all (`numel()`);
# - then `fully_shard(model)`: the root takes whatever is left;
# - return the names of the submodules made units (as `model.named_modules()` names them), in any order.
#
# Mind that `fully_shard` replaces the parameters of what it wraps with new (DTensor) objects.
#
# Your answer is a file: the module `ex06_work/wrapping.py`, handed out with `shard` raising
# `NotImplementedError`. The check runs the driver, `ex06_work/wrap_driver.py` beside this notebook (the next cell
# shows it), on 2 processes (about 20 s on a 2-core laptop): for a few models and thresholds it calls your
# `shard` on every rank, reports what each parameter became (its type, placements, the shape each rank
# holds), trains 2 SGD steps on one batch and keeps the full weights, to compare with one process.

# %% tags=["demo"]
show_file(WORK / "wrap_driver.py")

# %% [markdown]
# `run_driver(folder)` runs the driver on 2 processes with `--out folder/report` and returns the report
# and the weights; `trained_alone(kind)` gives the weights the same 2 steps give in one process.

# %%
import json


def run_driver(folder: Path, ranks: int = 2) -> tuple[dict, dict]:
    """``wrap_driver.py --out folder/report`` on ``ranks`` processes: (report, weights)."""
    if "NotImplementedError" in (WORK / "wrapping.py").read_text():  # an unanswered exercise: no torchrun launch
        raise NotImplementedError("wrapping.py still raises NotImplementedError")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(torchrun_command(str(WORK / "wrap_driver.py"), ["--out", str(folder / "report")],
                                           nproc_per_node=ranks),
                          capture_output=True, text=True, timeout=180, env=launch_env(threads=1), check=False)
    if "NotImplementedError" in done.stderr:
        raise NotImplementedError("wrapping.py still raises NotImplementedError")
    assert done.returncode == 0, f"the driver failed on {ranks} processes:\n{done.stdout[-1500:] or done.stderr[-1500:]}"
    report = json.loads((folder / "report.json").read_text())
    return report, torch.load(folder / "report.pt", weights_only=True)


def trained_alone(kind: str) -> dict[str, torch.Tensor]:
    """The weights after the driver's 2 SGD steps, in one process without FSDP."""
    torch.manual_seed(0)
    if kind == "nested":
        inner = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), inner, nn.Linear(16, 4))
    else:
        model = nn.Sequential(nn.Linear(8, 7), nn.ReLU(), nn.Linear(7, 4))
    generator = torch.Generator().manual_seed(1)
    inputs, targets = torch.randn(12, 8, generator=generator), torch.randn(12, 4, generator=generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    return model.state_dict()

# %% [markdown]
# Stuck? `hint("ex8", 1)` in a cell of your own, then `hint("ex8", 2)` and `hint("ex8", 3)`.

# %% nbgrader={"grade": false, "grade_id": "ex8-answer", "locked": true, "schema_version": 3, "solution": false, "task": false} tags=["answer-file:ex06_work/wrapping.py"]
# Exercise 8's answer is the file ex06_work/wrapping.py, not this cell: write `shard` there and save it.
# (Grading takes that file from beside your notebook.)

# %% nbgrader={"grade": true, "grade_id": "ex8-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 8"):
    report, weights = run_driver(WORK / "wrapped")
    nested = report["nested/200"]
    assert sorted(nested["units"]) == ["2.0", "2.2"], \
        (f"min_params=200: the two inner Linear layers (272 parameters each) are the units, and their block is not "
         f"(it holds no parameter that is not in a unit already); got {nested['units']}")
    assert nested["fsdp_modules"] == ["", "2.0", "2.2"], \
        f"fully_shard the units and the root, nothing else: FSDP modules {nested['fsdp_modules']}"
    assert all(p["type"] == "DTensor" and p["placements"] == ["Shard(dim=0)"] for p in nested["params"].values()), \
        "every parameter becomes a DTensor sharded by rows (Shard(dim=0))"
    for name, value in trained_alone("nested").items():
        assert torch.allclose(weights["nested/200"][name], value, atol=1e-5), \
            f"{name} after 2 steps on 2 ranks is not what one process gives"
### BEGIN HIDDEN TESTS
assert report["nested/500"]["units"] == ["2"], \
    (f"min_params=500: no inner layer (272) is enough, their block (544) is; got {report['nested/500']['units']}: "
     "a module's count includes its submodules that are not units")
assert sorted(report["nested/144"]["units"]) == ["0", "2.0", "2.2"], \
    f"min_params=144: a module with exactly min_params parameters is a unit too; got {report['nested/144']['units']}"
assert report["nested/10000"]["units"] == [] and report["nested/10000"]["fsdp_modules"] == [""], \
    "a threshold no module reaches: the root alone is the unit"
odd = report["odd/40"]
assert odd["units"] == ["0"] and odd["params"]["0.weight"]["shapes"] == [[4, 8], [3, 8]], \
    f"7 rows on 2 ranks: rank 0 holds 4 and rank 1 holds 3; got {odd['params']['0.weight']['shapes']}"
for key, kind in (("nested/500", "nested"), ("nested/144", "nested"), ("odd/40", "odd")):
    assert sorted(report[key]["params"]) == sorted(trained_alone(kind)), f"{key}: the parameters' names changed"
    for name, value in trained_alone(kind).items():
        assert torch.allclose(weights[key][name], value, atol=1e-5), f"{key}: {name} differs from one process"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 9 — Debug a job that does not survive losing an agent (beyond the guide) · 3 points · ★★★ · ~45 min
# Chapter 6.4 ran one job on two `torchrun` agents (`--nnodes=1:2`, a c10d rendezvous on 127.0.0.1, one
# process each) and killed one of them, as when a machine goes away: the agent that stays restarts its worker
# group at world size 1 — new processes, the *same* command line, `TORCHELASTIC_RESTART_COUNT` one higher —
# and the new group must go on from the newest distributed checkpoint. The script below trains with FSDP2 and
# SGD with momentum, each step on that step's batch shared out among the ranks, writes a DCP checkpoint after
# every step and logs JSON lines (its docstring says which). Its author resumed it by hand with `--resume`, on
# 2 processes again, and it worked. It is the file `ex06_work/elastic_train.py`; the next cell shows it, and the
# demo after `run_leave` stages chapter 6.4's leave with it (about 30 s on a 2-core laptop): two agents start it, and once step 10 is checkpointed at world size 2
# the guest agent is killed with its worker. The job ends without an error, but its log says that attempt 1,
# the group of 1, starts at step 0: it trains all 18 steps again, and on a job of days that is days lost.

# %% tags=["demo"]
show_file(WORK / "elastic_train.py")

# %% [markdown]
# `run_leave(script, folder)` is chapter 6.4's leave for such a script: two agents of one job, the host and the
# guest (`elastic_command` with `--max-restarts=1` and the chapter's keep-alive settings, so that the dead guest
# is dropped from the rendezvous after 2 s), started with `--steps 18 --step-delay 0.25` and the files of
# `folder`; `leave_later` kills the guest agent and its worker once step 10 is checkpointed at world size 2 and
# waits for the host agent. It returns the run's log. `groups(log)` sums the log up, one line per worker group,
# and `uninterrupted(steps)` is what the training must give: each step's 12 samples, in one process, no leave.

# %%
from common.ddp.launch import free_port
from common.fsdp.elastic import elastic_command, leave_later, read_log

STEPS, LEAVE_AFTER = 18, 10  # 8 steps (2 s) between the checkpoint that starts the leave and the end


def run_leave(script: Path, folder: Path) -> list[dict]:
    """``script`` on two elastic agents of one job, the guest killed after step ``LEAVE_AFTER``: the run's log.

    A job that fails raises ``AssertionError``, with the exception its ranks raised last."""
    if "NotImplementedError" in script.read_text():  # an unanswered exercise: no torchrun launch
        raise NotImplementedError(f"{script.name} still raises NotImplementedError")
    folder.mkdir(parents=True)
    args = ["--checkpoint", str(folder / "ckpt"), "--out", str(folder / "final.pt"), "--log-file",
            str(folder / "log.jsonl"), "--steps", str(STEPS), "--step-delay", "0.25"]
    options = {"endpoint": f"127.0.0.1:{free_port()}", "max_restarts": 1, "keep_alive_interval": 1,
               "keep_alive_max_attempt": 2}
    host, guest = (elastic_command(str(script), args, is_host=is_host, **options) for is_host in (True, False))
    try:
        leave_later(host, guest, folder / "log.jsonl", after_step=LEAVE_AFTER, timeout=90)
    except RuntimeError as error:  # the host agent failed, or an agent ended before the leave
        headline = str(error).splitlines()[0].rstrip(":")
        raise AssertionError(f"the job failed ({headline}): {what_failed(str(error))}") from None
    return read_log(folder / "log.jsonl")


def what_failed(output: str) -> str:
    """The last exception a rank raised, from a job's output (the output's end if it shows none)."""
    raised = [line.strip() for line in output.splitlines() if "ChildFailedError" not in line
              and re.match(r"\s*(\[rank\d+\]:\s*)?[\w.]*(Error|Exception): ", line)]
    return raised[-1] if raised else output[-1500:]


def groups(log: list[dict]) -> list[dict]:
    """The run's worker groups in order: rank 0's start record of each, with the steps checkpointed after it."""
    found = []
    for record in log:
        if record["event"] == "start" and record.get("rank") == 0:
            keys = ("attempt", "world_size", "step", "samples")
            found.append({**{key: record.get(key) for key in keys}, "checkpoints": []})
        elif record["event"] == "checkpoint" and found:
            found[-1]["checkpoints"].append(record.get("step"))
    return found


def uninterrupted(steps: int) -> dict[str, torch.Tensor]:
    """The weights after ``steps`` steps of the script's training on each step's 12 samples, in one process."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        generator = torch.Generator().manual_seed(step)
        inputs, targets = torch.randn(12, 8, generator=generator), torch.randn(12, 4, generator=generator)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    return model.state_dict()

# %% tags=["demo"]
shutil.rmtree(WORK / "leave", ignore_errors=True)  # a fresh start
as_written = groups(run_leave(WORK / "elastic_train.py", WORK / "leave"))
for summary in as_written:
    checkpointed = summary["checkpoints"] or ["none"]
    print(f"attempt {summary['attempt']}, world size {summary['world_size']}: starts at step {summary['step']}, "
          f"{summary['samples']} samples per rank and step, checkpoints {checkpointed[0]}–{checkpointed[-1]}")
assert [(g["attempt"], g["world_size"], g["step"]) for g in as_written][-1] == (1, 1, 0)

# %% [markdown]
# Your answer is a file: `ex06_work/fixed_elastic.py`, handed out as a copy of the script whose first line raises
# `NotImplementedError`. Delete that line and fix it; the check runs it the same way, without `--resume` (about
# 30 s), then once more on 1 process beside a checkpoint that never finished. Whenever the script starts — the
# first time, in a group that its agent restarts at another world size, or launched again later on any number
# of processes — it must go on from the newest complete checkpoint in `--checkpoint` (after this leave, attempt
# 1 starts at step 10, or 11 if the guest went a step later), train each step on the same 12 samples whatever
# the world size, and end at the weights the same steps give uninterrupted (`uninterrupted(18)`). Keep the
# arguments, the log's records (the docstring's) and the `step-N` folders. More than one thing stands between
# the script and that: the check names each requirement it finds unmet ("resumes on its own", "starts at the
# newest complete step", "same global batch", "goes on exactly"). Exercises 4 and 5 and chapters 6.2 and 6.4
# show every tool it takes. Stuck? `hint("ex9", 1)`, then `hint("ex9", 2)` and `hint("ex9", 3)`.

# %% nbgrader={"grade": false, "grade_id": "ex9-answer", "locked": true, "schema_version": 3, "solution": false, "task": false} tags=["answer-file:ex06_work/fixed_elastic.py:ex06_work/elastic_train.py"]
# Exercise 9's answer is the file ex06_work/fixed_elastic.py, not this cell: fix the script there and save it.
# (Grading takes that file from beside your notebook.)

# %% nbgrader={"grade": true, "grade_id": "ex9-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def left_alone(folder: Path) -> tuple[list[dict], dict]:
    """``fixed_elastic.py`` through the leave: the run's log and its final weights."""
    shutil.rmtree(folder, ignore_errors=True)  # nothing left from an earlier try
    log = run_leave(WORK / "fixed_elastic.py", folder)
    assert (folder / "final.pt").is_file(), f"the job wrote no final.pt; its log: {log[-3:]}"
    return log, torch.load(folder / "final.pt", weights_only=True)


def relaunch(folder: Path, ranks: int, steps: int) -> list[dict]:
    """``fixed_elastic.py`` launched again on ``ranks`` processes with ``--steps steps``: the log's new records."""
    before = len(read_log(folder / "log.jsonl"))
    done = run_fsdp(WORK / "fixed_elastic.py", folder, ranks, "--log-file", str(folder / "log.jsonl"),
                    "--steps", str(steps))
    assert done.returncode == 0, f"launched again on {ranks} processes, the job failed: {what_failed(done.stderr)}"
    return read_log(folder / "log.jsonl")[before:]


with checks("Exercise 9"):
    log, final = left_alone(WORK / "left")
    found = groups(log)
    assert found and (found[-1]["attempt"], found[-1]["world_size"]) == (1, 1), \
        f"after the leave the last group is attempt 1 at world size 1; the log's groups: {found}"
    for number, group in enumerate(found):
        newest = max((step for earlier in found[:number] for step in earlier["checkpoints"]), default=0)
        assert not (newest and group["step"] == 0), \
            (f"resumes on its own: attempt {group['attempt']} at world size {group['world_size']} starts at step 0, "
             f"but step {newest} was checkpointed before it (a restarted group runs the same command line)")
        assert group["step"] is not None and group["step"] >= newest, \
            (f"starts at the newest complete step: attempt {group['attempt']} starts at step {group['step']}, "
             f"but step {newest} was checkpointed before it")
    for group in found:
        assert (group["world_size"] or 0) * (group["samples"] or 0) == 12, \
            (f"same global batch: attempt {group['attempt']} at world size {group['world_size']} trains on "
             f"{group['samples']} samples per rank and step; every step trains on its 12 samples")
    for name, value in uninterrupted(STEPS).items():
        assert torch.allclose(final[name], value, atol=1e-5), \
            (f"goes on exactly: {name} is not what {STEPS} uninterrupted steps give (the group of 1 must go on "
             "exactly as the 2 would have: what else does a step depend on?)")
    (WORK / "left" / "ckpt" / f"step-{STEPS + 1}").mkdir()  # a save that never finished: no .metadata
    (WORK / "left" / "ckpt" / f"step-{STEPS + 1}" / "__0_0.distcp").write_bytes(b"")
    resumed = [r for r in relaunch(WORK / "left", 1, STEPS) if r["event"] == "start"]
    assert [r.get("step") for r in resumed] == [STEPS], \
        (f"starts at the newest complete step: launched again beside an unfinished step-{STEPS + 1} (no .metadata), "
         f"it must start at step {STEPS}; its start records: {resumed}")
### BEGIN HIDDEN TESTS
log = read_log(WORK / "left" / "log.jsonl")
done = [(r.get("rank"), r.get("step")) for r in log if r["event"] == "done"]
assert done and set(done) == {(0, STEPS)}, f"final.pt is written by rank 0 only: {done}"
files = sorted(p.name for p in (WORK / "left" / "ckpt" / f"step-{STEPS}").iterdir())
assert files == [".metadata", "__0_0.distcp"], f"step-{STEPS} is one DCP checkpoint of the 1 rank left: {files}"
(WORK / "left" / "ckpt" / "step-99").mkdir()  # a save that never finished: no .metadata
(WORK / "left" / "ckpt" / "step-99" / "__0_0.distcp").write_bytes(b"")
later = relaunch(WORK / "left", 3, STEPS + 2)
starts = sorted(tuple(r.get(key, -1) for key in ("rank", "attempt", "world_size", "step"))
                for r in later if r["event"] == "start")
assert starts == [(rank, 0, 3, STEPS) for rank in range(3)], \
    f"launched again on 3 processes beside an unfinished step-99, every rank goes on from step-{STEPS}: {starts}"
trained = {(r.get("world_size"), r.get("samples")) for r in later if r["event"] == "start"}
assert all((size or 0) * (samples or 0) == 12 for size, samples in trained), \
    f"each step trains on its 12 samples, shared out among the ranks: (world size, samples per rank) {trained}"
done = [(r.get("rank"), r.get("step")) for r in later if r["event"] == "done"]
assert done == [(0, STEPS + 2)], f"on 3 processes too, final.pt is written once, by rank 0: {done}"
files = sorted(p.name for p in (WORK / "left" / "ckpt" / f"step-{STEPS + 2}").iterdir())
assert files == [".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp"], \
    f"step-{STEPS + 2} is one DCP checkpoint of 3 ranks: {files}"
final = torch.load(WORK / "left" / "final.pt", weights_only=True)
for name, value in uninterrupted(STEPS + 2).items():
    assert torch.allclose(final[name], value, atol=1e-5), f"after 2 more steps on 3 processes, {name} differs"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
# - ZeRO stages 1, 2 and 3 shard the optimizer state, then the gradients, then the parameters; DDP shards nothing.
# - `Shard(0)` splits a parameter's rows as `torch.chunk` does: `ceil(rows / world_size)` each, the last ranks fewer.
# - A checkpoint is resharded by giving each new rank the rows its shard covers; DCP does it on load, on any world size.
# - Publish a checkpoint by renaming a finished folder; trust only a folder that holds its `.metadata`.
# - A resumable job writes one distributed checkpoint from all ranks, and its final file from one.
# - A `StatefulDataLoader`'s state knows where it is inside an epoch; the epoch is yours to save.
# - A wrapping policy visits children before parents and counts only the parameters no unit holds yet.
# - A group restarted at a new world size runs the same command line: resume from the newest complete checkpoint, optimizer included, and keep the global batch.
