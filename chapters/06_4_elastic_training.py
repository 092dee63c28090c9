# %% [markdown]
# # Chapter 6.4 — Elastic training: agents that join and leave a running job
# **Guide sections:** beyond the guide — the title's 大规模深度学习 (large-scale training); like §2.1
# 数据管道的概念与重要性 argues for the pipeline, a long run is only as good as its ability to stop and go on.
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - `torchrun --nnodes=1:2` with the c10d rendezvous on 127.0.0.1: one job, one or two agents (nodes)
# - A join, live: a second agent arrives, the group restarts at world size 2 and resumes from the
#   newest distributed checkpoint (Chapter 6.2) to the uninterrupted run's weights
# - A leave, live: one of two agents is killed, the other's worker fails in its next collective, and
#   the group restarts at world size 1 from the checkpoint, to the same weights
# - What `join_later` and `leave_later` do to stage it on one machine: agents started from `subprocess`,
#   a poll of the run's log, and a SIGKILL to an agent's whole process tree
# - What `--max-restarts` and a membership change cost, measured from the two runs' own logs
#
# > **Prerequisites:** chapters 4.2 and 6.2 · **Time:** about 20 min to read, 3 min to run on a 2-core laptop · **Main path:** every section; the code of `join_later` and `leave_later` shown folded is optional.

# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/06_4_elastic_training.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/torch-pipelines-companion/torch-pipelines-companion/blob/main/chapters/06_4_elastic_training.ipynb)
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
# The reference is an uninterrupted 1-process run of `common.fsdp.train --tiny` (8 steps), in this kernel.

# %%
import io
import re
import shutil
import subprocess
import sys
import textwrap
import time
from contextlib import redirect_stdout
from pathlib import Path

import pandas as pd
import psutil
import torch

from common import ensure_data, get_device, seed_everything
from common.ddp.launch import free_port
from common.fsdp import elastic as fsdp_elastic
from common.fsdp.elastic import elastic_command, join_later, leave_later, read_log
from common.fsdp.train import main
from common.source import show_file, show_source

seed_everything(0)
device = get_device()
data = ensure_data(verbose=False)
RUNS = Path("../runs/06_4")
shutil.rmtree(RUNS, ignore_errors=True)


def args(out: Path, *extra: str) -> list[str]:
    return ["--tiny", "--log-file", str(out / "log.jsonl"), "--save-final", str(out / "final.pt"),
            "--checkpoint", str(out / "ckpt"), "--checkpoint-every", "1", *extra]


def same_weights(out: Path) -> float:
    """The largest difference from the reference, after asserting PyTorch's float32 tolerances
    (TF32's, which cuDNN's convolutions use by default, if a run computed on a GPU)."""
    weights = torch.load(out / "final.pt", weights_only=True)
    on_gpu = any(r["event"] == "start" and r["device"].startswith("cuda")
                 for log in (out, RUNS / "uninterrupted") for r in read_log(log / "log.jsonl"))
    for key in reference:
        torch.testing.assert_close(weights[key], reference[key], rtol=1e-2 if on_gpu else 1.3e-6,
                                   atol=1e-3 if on_gpu else 1e-5)
    return max((weights[k] - reference[k]).abs().max().item() for k in reference)


def shown(command: list[str]) -> str:
    return "torchrun " + re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", " ".join(command[3:])).replace(
        str(RUNS), "RUN")


with redirect_stdout(io.StringIO()):  # its JSON lines go to the log file only
    assert main(args(RUNS / "uninterrupted")) == 0
reference = torch.load(RUNS / "uninterrupted" / "final.pt", weights_only=True)
print("device:", device, "| runs in", RUNS, "| reference tensors:", len(reference))

# %% [markdown]
# The two experiments of this chapter on one time line: a join, then a leave, each a new rendezvous round.
#
# ![An elastic rendezvous: agents joining and leaving](figures/elastic_rendezvous.svg)
#
# *Every change of membership is a new rendezvous round and a restart at the new world size from the newest checkpoint; only a leave uses up a --max-restarts attempt.*

# %% [markdown]
# ## A second agent joins a running job
# `torchrun --nnodes=1:2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT` lets a job run with 1 or 2
# agents (nodes). The first agent waits `last_call_timeout` seconds (torch's default is 30; 1 here) for
# company, then starts at world size 1. A second agent that arrives later waits in the rendezvous; the
# running agent's monitor loop sees it (`num_nodes_waiting() > 0`), stops its workers, and both start a
# new group at world size 2 — which resumes from the newest checkpoint. On one machine,
# `common.fsdp.elastic.join_later` makes that happen: it starts the first agent and, once step 1 is
# checkpointed, the second. At heart that is a few lines of `subprocess`. To try them without a training
# run, a stand-in agent, `scripts/06_4/toy_agent.py`: a script that appends a checkpoint record to the
# run's log (its first argument) every 0.2 s for a number of steps (its second), as
# `common.fsdp.train --log-file` does:

# %%
toy_agent_script = Path("scripts/06_4/toy_agent.py")
show_file(toy_agent_script)

# %%
def toy_agent(log_file: Path, steps: int = 3) -> list[str]:
    """The command line of a stand-in agent that logs a checkpoint of each step."""
    return [sys.executable, str(toy_agent_script), str(log_file), str(steps)]


toy = RUNS / "toy"
toy.mkdir(parents=True)
subprocess.run(toy_agent(toy / "alone.jsonl", steps=2), check=True)
[(r["event"], r["step"]) for r in read_log(toy / "alone.jsonl")]

# %% [markdown]
# `join_later` in its teaching form: start one agent, poll the run's log until it holds a checkpoint of
# `after_step`, start the second, wait for both:

# %%
def join_later_taught(command: list[str], log_file: Path, *, after_step: int) -> tuple[float, list]:
    """Start one agent; once the log holds a checkpoint of ``after_step``, start a second."""
    first = subprocess.Popen(command)
    while not any(r["event"] == "checkpoint" and r["step"] >= after_step
                  for r in read_log(log_file)):
        time.sleep(0.05)  # the run's own log says how far it got
    joined_at, second = time.time(), subprocess.Popen(command)
    for agent in (first, second):
        agent.wait()
    return joined_at, [first.pid, second.pid]


toy_joined_at, pids = join_later_taught(toy_agent(toy / "join.jsonl"), toy / "join.jsonl", after_step=1)
toy_log = read_log(toy / "join.jsonl")
before_join = [r for r in toy_log if r["time"] < toy_joined_at]
assert before_join[0]["step"] == 1 and {r["pid"] for r in before_join} == {pids[0]}
pd.DataFrame([{"agent": ["first", "second"][pids.index(r["pid"])], "step": r["step"],
               "s after the join": round(r["time"] - toy_joined_at, 2)} for r in toy_log])

# %% [markdown]
# The second agent started once the first had logged step 1, and both went on. What the teaching
# form leaves out, `common.fsdp.elastic.join_later` adds: a deadline, and a first agent that ends before
# `after_step` (a crash, a wrong flag) stops the wait instead of leaving it polling forever; both
# agents' output captured (the cells below read the device plan from it); on a timeout, SIGKILL to each
# agent's whole process tree (why the tree, the leave below shows); the exit codes checked; and one
# environment for both, `launch_env()` plus `COMPANION_RANKS_PER_HOST` and, since a change of
# membership restarts the workers, `RESTART_SAFE_ENV` (`agents_env`):

# %% tags=["hide-output"]
show_source(join_later)

# %% [markdown]
# The real join: `--step-delay` keeps the run going long enough, and `--async-save` writes every step's
# checkpoint in the background. Each agent's worker is LOCAL_RANK 0, so `join_later` tells them that 2
# ranks share this host (`COMPANION_RANKS_PER_HOST=2`): with 2 GPUs each takes its own, with fewer both
# run on the CPU, and rank 0 says so in one line:

# %%
out = RUNS / "join"
command = elastic_command("common.fsdp.train", args(out, "--async-save", "--step-delay", "1.5"),
                          endpoint=f"127.0.0.1:{free_port()}", max_restarts=0)
print(shown(command))
joined = join_later(command, out / "log.jsonl", after_step=1, timeout=600)  # minutes on a busy machine
join_log = read_log(out / "log.jsonl")
assert [r["world_size"] for r in join_log if r["event"] == "start"] == [1, 2]
resumed = [r for r in join_log if r["event"] == "resume"]
assert [r["world_size"] for r in resumed] == [2] and resumed[0]["step"] < 8  # joined mid-run
plans = {line for output in joined.outputs for line in output.splitlines()
         if line.startswith("device plan:")}
print(*sorted(plans) or ["device plan: each of the 2 ranks on its own GPU with nccl"])
print("max |w - uninterrupted|:", same_weights(out))

# %% [markdown]
# The run's log, as a table: each `start` is a new worker group, each `resume` a load of the checkpoint.

# %%
def table(log: list[dict], since: float, label: str) -> pd.DataFrame:
    return pd.DataFrame([{"event": r["event"], "attempt": r["attempt"], "world size": r.get("world_size"),
                          "step": r.get("step"), "loader": r.get("loader", ""),
                          label: round(r["time"] - since, 1)}
                         for r in log if r["event"] in ("start", "resume", "done")])


table(join_log, joined.joined_at, "s after the join")

# %% [markdown]
# The resumed run reaches the uninterrupted run's weights: the checkpoint of world size 1 loads at world
# size 2, and with the global batch fixed the position (not the per-rank loader state, which belongs to a
# rank of one world size) says where the epoch goes on. The join did not use a `--max-restarts` attempt
# (`--max-restarts=0` above, and `attempt` stays 0): torch's `SimpleElasticAgent._invoke_run` restarts
# the group on a join with the comment "membership changes do not count as retries".

# %% [markdown]
# ## An agent leaves
# Now the reverse: two agents start together, so the job runs at world size 2, and after step 2 one of
# them goes away — SIGKILL to the agent and its worker, as when a machine dies. Which one matters on
# loopback: the agent that hosts the c10d rendezvous's TCPStore is the one every agent asks about the
# rendezvous; kill it and the other agent fails with `RendezvousConnectionError: ... Broken pipe`
# instead of going on. Left to themselves, both agents on 127.0.0.1 try to host it and the first to bind
# the port wins, so `elastic_command(..., is_host=...)` says which one hosts (`--rdzv-conf` key
# `is_host`), and `leave_later` kills the other, the guest. Two more rendezvous settings:
# `keep_alive_interval=1,keep_alive_max_attempt=2` — an agent whose heartbeat is 2 s old is dead and
# removed from the rendezvous (torch's defaults, 5 s and 3, would wait 15 s) — and `--max-restarts=1`,
# because for the agent that stays the leave is a failure of its worker.

# %% [markdown]
# `leave_later` starts both agents, waits in the same way for a checkpoint (made by the group of world
# size 2), and then kills the guest. The killing needs care: torchrun starts each worker with
# `start_new_session=True` (in its `SubprocessHandler`), so a worker is in neither its agent's process
# group nor its session, and a SIGKILL, which the agent cannot catch to clean up, reaches the agent
# alone. A stand-in agent, `scripts/06_4/toy_agent_with_worker.py`, starts its worker (a process that
# sleeps for a minute) the same way:

# %%
toy_worker_script = Path("scripts/06_4/toy_agent_with_worker.py")
show_file(toy_worker_script)

# %% [markdown]
# Started, then killed alone:

# %%
def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def toy_agent_with_worker() -> tuple[subprocess.Popen, psutil.Process]:
    agent, deadline = subprocess.Popen([sys.executable, str(toy_worker_script)]), time.monotonic() + 30
    while not psutil.Process(agent.pid).children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return agent, psutil.Process(agent.pid).children()[0]


agent, worker = toy_agent_with_worker()
agent.kill()  # SIGKILL to the agent alone
agent.wait()
print("agent exit code:", agent.returncode, "| its worker alive:", alive(worker))
assert alive(worker)
worker.kill()  # the orphan, by its pid

# %% [markdown]
# A worker orphaned like this in the real job would go on running, its connections to the other
# worker still open, and nothing would look like a machine gone. So `_kill_tree` first lists the
# agent's descendants (psutil's `children(recursive=True)`, while they are still its children) and then
# SIGKILLs every one:

# %%
agent, worker = toy_agent_with_worker()
fsdp_elastic._kill_tree(agent)
agent.wait()
deadline = time.monotonic() + 5
while alive(worker) and time.monotonic() < deadline:  # a SIGKILL is delivered, not awaited
    time.sleep(0.02)
assert not alive(worker)
print("after _kill_tree: agent exit code", agent.returncode, "| its worker alive:", alive(worker))

# %% tags=["hide-output"]
show_source(fsdp_elastic._kill_tree)

# %% [markdown]
# The rest of `leave_later` is the join's loop: one environment for both agents, a wait for a checkpoint
# made after the group of 2 started (`_checkpointed_at_world_size`), a deadline that kills both agents if
# either ends early, and the host agent's exit code checked:

# %% tags=["hide-output"]
show_source(leave_later)

# %% [markdown]
# The real leave, with the settings above:

# %%
out = RUNS / "leave"
options = {"endpoint": f"127.0.0.1:{free_port()}", "max_restarts": 1, "keep_alive_interval": 1,
           "keep_alive_max_attempt": 2}
host, guest = (elastic_command("common.fsdp.train", args(out, "--step-delay", "0.25"), is_host=is_host,
                               **options) for is_host in (True, False))
print(shown(host))
left = leave_later(host, guest, out / "log.jsonl", after_step=2, timeout=600)
leave_log = read_log(out / "log.jsonl")
# [2, 1]; [1, 2, 1] if the guest came later than last_call_timeout and joined a running group
assert [r["world_size"] for r in leave_log if r["event"] == "start"][-2:] == [2, 1]
assert [(r["world_size"], r["attempt"]) for r in leave_log if r["event"] == "resume"][-1] == (1, 1)
print("max |w - uninterrupted|:", same_weights(out))

# %% [markdown]
# What the remaining worker saw: its next collective (gloo, over TCP) found the connection to the dead
# peer closed — no timeout to wait for, the kernel closes a killed process's sockets — so it raised, and
# its agent reported the failure and restarted the group. From the host agent's output, the lines that
# say so (the worker's error, "Connection closed by peer" or "Connection reset by peer" depending on
# when the kill came, and the agent's report), whole (wrapped, without their time stamps and process ids):

# %%
SIGNS = ("Connection closed by peer", "Connection reset by peer", "failed (exitcode")
failure = [re.sub(r"\[/__w/\S+\]", "[gloo/transport/tcp/pair.cc]", line.strip())
           for line in left.outputs[0].splitlines() if any(sign in line for sign in SIGNS)]
assert failure, "the host agent's output names no failed worker"
for line in dict.fromkeys(re.sub(r" ?\(pid: \d+\)( of binary: \S+)?|^E\d+ [\d:.]+ \d+ ", "", line) for line in failure):
    print(textwrap.fill(line, width=100, subsequent_indent="    "))

# %%
table(leave_log, left.left_at, "s after the leave")

# %% [markdown]
# ## What `--max-restarts` and the membership change cost
# Both changes are a full restart of the worker group: new processes, a new rendezvous, the checkpoint
# loaded. From the two logs: how long the job did not train, how many steps it did twice (the old
# group's last checkpointed step minus the step it resumed at), and how many `--max-restarts`
# attempts it used (the `attempt` field, torchrun's `TORCHELASTIC_RESTART_COUNT`):

# %%
def cost(log: list[dict], since: float) -> dict:
    *_, before_change, restart = [r for r in log if r["event"] == "start"]
    resume = [r for r in log if r["event"] == "resume"][-1]
    before = [r["step"] for r in log if r["event"] == "checkpoint" and r["time"] < restart["time"]]
    return {"world size": f"{before_change['world_size']} → {restart['world_size']}",
            "s to the new group's start": round(restart["time"] - since, 1),
            "s to training again (resumed)": round(resume["time"] - since, 1),
            "resumed at step": resume["step"],
            "steps done twice": max(before, default=0) - resume["step"],
            "--max-restarts attempts used": max(r["attempt"] for r in log)}


costs = pd.DataFrame({"join": cost(join_log, joined.joined_at), "leave": cost(leave_log, left.left_at)})
assert costs.loc["--max-restarts attempts used"].tolist() == [0, 1]
costs

# %% [markdown]
# The table's numbers, spelled out by the cell that measured them:

# %%
join_cost, leave_cost = costs["join"], costs["leave"]
print(f"join: training again {join_cost['s to training again (resumed)']} s after the second agent "
      f"started, {join_cost['--max-restarts attempts used']} restart attempts used")
print(f"leave: training again {leave_cost['s to training again (resumed)']} s after the kill, "
      f"{leave_cost['--max-restarts attempts used']} of --max-restarts=1 used, "
      f"{leave_cost['steps done twice']} steps done twice")

# %% [markdown]
# The join's time is mostly the new agent's own start (Python, torch, the rendezvous) plus the workers'
# restart; the leave's adds the dead agent's removal (2 missed heartbeats here) and `last_call_timeout`.
# Steps are lost only back to the newest *published* checkpoint — with `--checkpoint-every 1` none or one;
# with a checkpoint every 1000 steps up to 999. And the leave spent the job's only restart: a second
# failure (or leave) would end it, where a join costs no attempt at all.

# %% [markdown]
# ## Summary
# - `torchrun --nnodes=1:2` with a c10d rendezvous runs one job on 1 or 2 agents; each membership change
#   restarts the whole worker group, which resumes from the newest distributed checkpoint.
# - A join: the running agent sees a waiting node, the group restarts at world size 2, no restart attempt used.
# - A leave: the peer's next gloo collective fails (the connection closed or reset by the peer), the agent restarts the
#   group at world size 1 and uses one of `--max-restarts`.
# - On loopback, the agent that hosts the rendezvous's TCPStore must stay (`is_host`); dead peers are
#   dropped after `keep_alive_interval × keep_alive_max_attempt` seconds.
# - Both runs end at the uninterrupted run's weights: the checkpoint reshards, and the position in the
#   epoch (not a per-rank loader state) carries over to the new world size.
# - Staging it on one machine is `subprocess` and a poll of the run's log; a machine's death is a SIGKILL
#   to the agent's whole process tree, since torchrun starts its workers in sessions of their own.

# %% [markdown]
# ## Further reading
# - [torchrun (elastic launch)](https://pytorch.org/docs/stable/elastic/run.html): `--nnodes=MIN:MAX`, the c10d rendezvous, `--max-restarts` and the environment each worker gets.
# - [Elastic agent](https://pytorch.org/docs/stable/elastic/agent.html): the monitor loop that restarts a worker group, on a failure or on a membership change.
# - [Rendezvous](https://pytorch.org/docs/stable/elastic/rendezvous.html): the dynamic rendezvous, its keep-alive and `last_call_timeout` settings, and the c10d backend.
# - [Fault-tolerant training with torchrun](https://pytorch.org/tutorials/beginner/ddp_series_fault_tolerance.html): the official tutorial's snapshot-and-resume loop, the same idea as this chapter's checkpoints.
# - [Asynchronous saving with DCP](https://pytorch.org/tutorials/recipes/distributed_async_checkpoint_recipe.html): the recipe behind `--async-save`.

# %% [markdown]
# ## Exercises
# 1. Run the leave with torch's default keep-alive settings (drop `keep_alive_interval` and
#    `keep_alive_max_attempt`). How much longer does the restart take, and why?
# 2. Kill the *host* agent instead of the guest. What does the remaining agent report, and what would
#    a real cluster put at the rendezvous endpoint so that no training node has to host it?
# 3. Run the leave with `--max-restarts=0`. What happens to the remaining agent?
# 4. Checkpoint every 3 steps instead of every step and leave after step 2. How many steps are done
#    twice, and does the run still reach the uninterrupted weights?
# 5. Write `leave_later` in its teaching form with `guest.kill()` (the agent alone) in place of
#    `_kill_tree`, and run the leave with it. What does the host agent's log show, and how long does
#    the job take?

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. What does `torchrun --nnodes=1:2` with a c10d rendezvous allow, and what does the first agent do while it is alone?
# 2. How does a running job notice that a second agent has joined, and what happens next?
# 3. Which membership change uses up a `--max-restarts` attempt: a join, a leave, or both?
# 4. When the guest agent is killed, how does the remaining worker find out, and what does its agent do?
# 5. On loopback, why must the guest rather than the host agent be the one that leaves, and how does the chapter say which agent hosts?
# 6. What do `keep_alive_interval=1,keep_alive_max_attempt=2` change?
# 7. Why does a SIGKILL to the agent alone not stage a machine's death, and what does `_kill_tree` do instead?
# 8. Both elastic runs ended at the uninterrupted run's weights. What carries over to the new world size, and what does not?
# 9. How many steps does a restart cost, and what decides it?
