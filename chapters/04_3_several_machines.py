# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 4.3 — Several machines
# **Guide sections:** beyond the guide (it breaks off in §2.3.1); extends its distributed-training part (the title's 分布式训练) from one machine to several
# [Glossary / 术语表](../GLOSSARY.md)
# ## What you will learn
# - How to make hosts with network stacks of their own on one Linux machine (network namespaces on a
#   private switch), and run `torchrun` on two of them as on two machines
# - The five classic reasons a job that runs on one machine hangs on two, each reproduced with the
#   symptom you would see, and a preflight command that names each one before you launch
# - What a link's bandwidth does to an all-reduce, measured at 100 Mbit/s, 1 Gbit/s and 10 Gbit/s on
#   2 and 3 hosts, and what it means for DDP's buckets, `no_sync` and FSDP
#
# > **Prerequisites:** chapters 4.1 and 4.2 · **Time:** about 25 min to read, 6 min to run on a 2-core laptop (as root) · **Main path:** sections 1–4; sections titled "Going further" are optional.

# %% [markdown]
# ## Setup
# Every host below is a *network namespace*: a copy of the kernel's network stack with its own
# interfaces, addresses, routes and firewall. Making one needs root, so this notebook runs its cells
# only where it is root (a VM, a container started with `--privileged`, Colab); elsewhere it prints
# why and keeps its stored outputs.

# %%
import sys
import textwrap

import pandas as pd

from common import read_figure
from common.ddp.bandwidth import INTERCONNECTS, fit, implications
from common.ddp.bandwidth import measure as measure_allreduce
from common.ddp.cluster import Cluster, run_together, symptom, unavailable
from common.readings import machine_state
from common.source import show_file

# %% tags=["parameters"]
# Sizes of this chapter's runs. `make test` runs the notebook with smaller ones (tests/notebook_parameters.py).
SIZES_KIB = [256, 4096, 16384]  # all-reduce message sizes, KiB
RATES_MBIT = [100, 1000, 10000]  # link rates, Mbit/s
REPEATS = 3  # timed all-reduces per size and rate
HOSTS = [2, 3]  # numbers of hosts the all-reduce is measured on
WAIT = 10  # seconds a failing launch waits for its rendezvous and process group (the preflight as long)
HANG = 20  # seconds the launch at a silent listener runs before it is killed

# %%
REASON = unavailable()
if REASON:
    print(f"This kernel cannot make hosts, so the cells below do not run here: {REASON}. "
          "The outputs you see were stored when the notebook ran as root.")
else:
    print("Root: this notebook makes its own hosts.")
PYTHON = sys.executable


def torchrun(nnodes="2", endpoint="node0:29500", nproc=1, wait=WAIT):
    """torchrun of scripts/04_3/allreduce.py with short timeouts: seconds, not torch's minutes."""
    return [PYTHON, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", "--rdzv-id=demo",
            f"--rdzv-conf=join_timeout={wait},read_timeout={wait}",
            "scripts/04_3/allreduce.py", "--timeout", str(wait)]


def preflight(*args):
    return [PYTHON, "-m", "common.ddp.preflight", *args]


def show(outcomes):
    for outcome in outcomes:
        print(textwrap.fill(symptom(outcome), width=110, subsequent_indent="    "))


def show_preflight(outcome):
    print(outcome.output.rstrip())


# %% [markdown]
# ## 1. Two hosts on one machine
# `Cluster(3)` builds a switch (a Linux bridge, in a namespace of its own) and three hosts, `node0`
# to `node2`. Each host gets a cable to the switch (a veth pair), one interface `eth0` with an address
# in the private network 10.213.7.0/24 — it exists only inside these namespaces — its own hostname, and
# its own `/etc/hosts`, which `ip netns exec` shows in place of the machine's. A command runs "on" a
# host through `cluster.command(i, argv)`: `ip netns exec <namespace> unshare --uts` with the hostname set.

# %%
cluster = None
if not REASON:
    cluster = Cluster(3)
    cluster.start()
    print(" ".join(arg.rsplit("/", 1)[-1] if arg.startswith("/") else arg
                   for arg in cluster.command(1, ["hostname"])))
    print(cluster.run(1, ["sh", "-c", "hostname; cat /etc/hosts; ip -4 -brief address"]).stdout)

# %% [markdown]
# The script each rank runs adds its rank + 1 in one all-reduce: 1 + 2 + 3 + 4 = 10 for 4 ranks. It
# gives the process group a timeout of 10 s, and the launcher below gives the rendezvous the same, so a
# failure shows within seconds instead of torch's default 30 minutes:

# %%
show_file("scripts/04_3/allreduce.py")

# %% [markdown]
# The same `torchrun` command on `node0` and `node1`, 2 ranks each; the rendezvous endpoint is
# `node0:29500`, which both hosts resolve through their hosts file:

# %%
if cluster:
    print(" ".join(torchrun(nproc=2)).replace(PYTHON, "python"))
    together = run_together(cluster, {0: torchrun(nproc=2), 1: torchrun(nproc=2)}, timeout=120)
    for outcome in together:
        print(f"--- {outcome.host} (exit {outcome.returncode})")
        print("\n".join(line for line in outcome.output.splitlines() if line.startswith("rank")))
    assert all(o.returncode == 0 for o in together)

# %% [markdown]
# That is a real two-host job: each host sees only its own `eth0`, and the ranks of `node1` reach
# `node0` through the switch. The tests (`tests/system/test_cluster_train.py`) train `common.ddp.train`
# and `common.fsdp.train` this way, to the same weights as one process, and lose a host mid-run.
#
# ## 2. Five ways to hang on two machines
# Each failure below is one line changed in the setup above. For each: the symptom, what
# `python -m common.ddp.preflight` says on the host at fault, and the fix. The preflight takes the
# endpoint and `--nnodes` you give `torchrun`, prints one verdict per check and exits 1 on any `FAIL`.
#
# **The endpoint `localhost` on the second node.** `node1` is told `--rdzv-endpoint=localhost:29500`.
# It hosts a store of its own and waits there; `node0` waits at its own. Both time out:

# %%
if cluster:
    show(run_together(cluster, {0: torchrun(), 1: torchrun(endpoint="localhost:29500")}, timeout=60))
    show_preflight(run_together(cluster, {1: preflight("--endpoint", "localhost:29500", "--nnodes", "2")},
                                timeout=60)[0])

# %% [markdown]
# Fix: the same endpoint on every node, naming the first node (`node0:29500`, or its address).
#
# **A second interface that does not route.** `node1` gets a second interface `eth1` (10.213.8.2, a
# cable plugged into nothing), and `GLOO_SOCKET_IFNAME=eth1` — copied from another cluster's script,
# say. The rendezvous works; then gloo on `node1` listens on eth1's address, which `node0` cannot reach:

# %%
if cluster:
    cluster.add_dead_interface(1, "eth1")
    show(run_together(cluster, {0: torchrun(), 1: torchrun()}, timeout=60,
                      env={"GLOO_SOCKET_IFNAME": "eth1"}))
    show_preflight(run_together(cluster, {1: preflight("--endpoint", "node0:29500", "--nnodes", "2",
                                                       "--timeout", str(WAIT))},
                                timeout=60, env={"GLOO_SOCKET_IFNAME": "eth1"})[0])

# %% [markdown]
# Fix: the interface the preflight names (`GLOO_SOCKET_IFNAME=eth0`, and `NCCL_SOCKET_IFNAME` for
# NCCL on GPUs), or none at all when the hostname resolves to the right address.
#
# **A port dropped by a firewall.** A rule on `node0` drops TCP packets to port 29500 from the network
# (`nft`: `iifname != "lo" tcp dport 29500 drop`). A drop gives no answer at all, so `node1` waits for
# its connection until the timeout:

# %%
if cluster:
    cluster.block_port(0, 29500)
    show(run_together(cluster, {0: torchrun(), 1: torchrun()}, timeout=60))
    show_preflight(run_together(cluster, {1: preflight("--endpoint", "node0:29500", "--nnodes", "2",
                                                       "--timeout", str(WAIT // 2))}, timeout=60)[0])
    cluster.unblock(0)

# %% [markdown]
# Fix: open the port on the first node (`nft`/`iptables`/`firewalld`, or your cloud's security group),
# or pick one that is open.
#
# **`--nnodes` that differ.** `node0` says 2, `node1` says 3. The first to arrive sets up the
# rendezvous; the other's is closed to it, and the group never forms. Here the preflight runs on both
# nodes, `node0` serving a store on the endpoint's port so that they compare what they were told:

# %%
if cluster:
    show(run_together(cluster, {0: torchrun(), 1: torchrun(nnodes="3")}, timeout=60))
    for outcome in run_together(cluster, {0: preflight("--endpoint", "node0:29500", "--nnodes", "2", "--serve",
                                                       "--timeout", str(WAIT // 2)),
                                          1: preflight("--endpoint", "node0:29500", "--nnodes", "3",
                                                       "--timeout", str(WAIT // 2))}, timeout=60):
        print("\n".join(line for line in outcome.output.splitlines() if "nnodes" in line or "verdict" in line))

# %% [markdown]
# Fix: the same `--nnodes` everywhere (with Slurm, `$SLURM_JOB_NUM_NODES`, as
# `chapters/04_slurm_ddp_train.sbatch` does).
#
# **A port held by a silent listener.** Something on `node0` holds port 29500: it accepts connections
# and never answers (a stuck process, a debugger, another tool's server). `torchrun` connects and waits
# for an answer that never comes: no message, no exit, until we kill it after 20 s:

# %%
SILENT = ("import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', 29500)); s.listen()\n"
          "held = []\nprint('listening', flush=True)\nwhile True: held.append(s.accept())\n")
if cluster:
    listener = cluster.popen(0, [PYTHON, "-c", SILENT])
    assert listener.stdout.readline().strip() == "listening"
    show(run_together(cluster, {1: torchrun()}, timeout=HANG))
    show_preflight(run_together(cluster, {1: preflight("--endpoint", "node0:29500", "--nnodes", "2",
                                                       "--timeout", "3")}, timeout=60)[0])
    listener.kill()
    listener.communicate()

# %% [markdown]
# Fix: stop what holds the port (`ss -ltnp 'sport = :29500'` on the first node names it), or use
# another port.
#
# **The hostname that resolves to 127.0.1.1.** Debian and Ubuntu installers write
# `127.0.1.1 <hostname>` into `/etc/hosts`. Gloo (and NCCL) pick the address a rank listens on from its
# hostname, so `node1` listens on 127.0.1.1 and tells `node0` so; `node0` connects to 127.0.1.1 —
# itself. A new cluster whose hosts files have that line:

# %%
if cluster:
    cluster.stop()
    with Cluster(2, loopback_hostname=True) as trapped:
        print(trapped.run(1, ["cat", "/etc/hosts"]).stdout)
        show(run_together(trapped, {0: torchrun(), 1: torchrun()}, timeout=60))
        show_preflight(run_together(trapped, {1: preflight("--endpoint", "node0:29500", "--nnodes", "2",
                                                         "--timeout", str(WAIT))},
                                    timeout=60)[0])

# %% [markdown]
# Fix: give the hostname the host's real address in `/etc/hosts` (or DNS), or set
# `GLOO_SOCKET_IFNAME`/`NCCL_SOCKET_IFNAME` to the interface the preflight names.
#
# ## 3. Bandwidth: what a link does to an all-reduce
# `tc qdisc ... tbf` (a token bucket) limits what each host sends through `eth0`. The worker
# `python -m common.ddp.bandwidth` times `all_reduce` of float32 tensors of several sizes, at each rate
# in turn (every rank limits its own host's link), and rank 0 prints the medians. Two hosts, then three:

# %%
rows = []
before = machine_state()  # the load before three hosts' all-reduces add their own
if not REASON:
    with Cluster(3, prefix="c43bw") as links:
        for hosts in HOSTS:
            for record in measure_allreduce(links, hosts, [k * 1024 for k in SIZES_KIB], RATES_MBIT,
                                            repeats=REPEATS):
                for size, seconds in zip(record["sizes"], record["seconds"], strict=True):
                    rows.append({"hosts": hosts, "Mbit/s": record["mbit"], "KiB": size // 1024,
                                 "ms": round(seconds * 1000, 2)})
    table = pd.DataFrame(rows).pivot_table(index=["hosts", "KiB"], columns="Mbit/s", values="ms")
    print("all-reduce time, ms (median of", REPEATS, "runs)")
    print(table.to_string())

# %% [markdown]
# A ring all-reduce of S bytes over p hosts sends 2(p − 1)/p · S bytes out of every host: S for 2 hosts,
# 4/3 S for 3. So its time is about α + 2(p − 1)/p · S / B, with α a fixed cost per call and B the
# link's bandwidth. `fit` finds α and B from the measured sizes, per rate and number of hosts:

# %%
models = {}
if rows:
    frame = pd.DataFrame(rows)
    for (hosts, mbit), group in frame.groupby(["hosts", "Mbit/s"]):
        models[hosts, mbit] = fit(group["KiB"] * 1024, group["ms"] / 1000, hosts)
    summary = pd.DataFrame([{"hosts": h, "link Mbit/s": m, "fitted Mbit/s": round(f.bytes_per_s * 8 / 1e6),
                             "latency ms": round(f.latency * 1000, 2)} for (h, m), f in models.items()])
    print(summary.to_string(index=False))
    slow = models[2, min(RATES_MBIT)]
    read_figure("04_3/bandwidth-at-slowest-link", slow.bytes_per_s * 8 / 1e6 / min(RATES_MBIT) * 100,
                unit="%", what=f"fitted all-reduce bandwidth on 2 hosts, of the {min(RATES_MBIT)} Mbit/s link",
                expect=(">=", 80.0), machine=before)

# %% [markdown]
# At 100 Mbit/s the fitted bandwidth is the link's. At 10 Gbit/s it is far below the link: two CPU
# cores summing floats and copying them through the kernel are the limit, not the cable — as on real
# machines, where the NIC, PCIe and the reduction itself all have a rate.
#
# ## 4. What it means for DDP and FSDP
# For a model of P float32 parameters the gradients are 4P bytes. DDP all-reduces them once per optimizer
# step, in buckets (25 MiB by default, `bucket_cap_mb`); FSDP all-gathers the parameters in forward and
# again in backward and reduce-scatters the gradients: 3 × (p − 1)/p · 4P bytes, 1.5 × DDP's. With
# `no_sync` over 4 micro-batches (gradient accumulation, chapter 4.2) DDP syncs once per 4. For
# ResNet-50 (25.6 M parameters) on each fitted link of 2 hosts:

# %%
if models:
    params = 25_600_000
    lines = []
    for (hosts, mbit), model in models.items():
        if hosts != 2:
            continue
        found = implications(model, params, accumulate=4)
        lines.append({"link Mbit/s": mbit, "DDP sync s": round(found.sync_seconds, 2),
                      "with no_sync x4, s per micro-batch": round(found.accumulated_seconds, 2),
                      "FSDP s": round(found.fsdp_seconds, 2),
                      "FSDP extra MB": round(found.fsdp_extra_bytes / 1e6),
                      "smallest bucket that hides latency, KiB": round(found.bucket_bytes / 1024)})
    print(pd.DataFrame(lines).to_string(index=False))

# %% [markdown]
# Read it as a budget: a step that computes for 0.5 s cannot hide a sync of several seconds, so on a
# 100 Mbit/s link ResNet-50 does not scale at all; accumulation divides the sync by the number of micro-batches;
# FSDP's extra half is a price worth paying only where memory, not the link, is the limit. The bucket
# column is the smallest bucket whose transfer takes 9 times the fitted latency α: compare it with DDP's
# 25 MiB default. On these links α is at most a few milliseconds (and noisy: two busy cores), so
# bandwidth, not latency, is the cost; smaller buckets would start the first all-reduce earlier in
# backward. Real links, in gigabytes per second per direction:

# %%
print(pd.DataFrame(INTERCONNECTS, columns=["link", "GB/s", "source"]).to_string(index=False))
if models:
    fastest = max(model.bytes_per_s for model in models.values()) / 1e9
    print(f"fastest fitted here: {fastest:.2f} GB/s; NVLink 4 moves {450 / fastest:,.0f}x that, "
          f"InfiniBand NDR {50 / fastest:,.0f}x")

# %% [markdown]
# NVLink moves hundreds of times what the fastest link of these namespaces moved, and InfiniBand NDR
# between machines tens of times (the ratios above): why a node's 8 GPUs sync among themselves first
# (NCCL's rings and trees follow the topology) and why multi-node jobs want InfiniBand.

# %%
if not REASON:  # every host, cable and /etc/netns entry of this notebook is gone
    print("namespaces left:", Cluster(3).namespaces() + Cluster(3, prefix="c43bw").namespaces())

# %% [markdown]
# ## Summary
# - A network namespace is a host with a network of its own: on one Linux machine, as root, `Cluster`
#   builds several on a private switch, each with an address, a hostname and an `/etc/hosts`.
# - `torchrun` on two of them is a real two-host job: the same command on every node, one endpoint
#   naming the first node, the same `--nnodes`.
# - The classic hangs are network facts, not PyTorch bugs: an endpoint of `localhost`, an interface that
#   does not route, a firewall's drop, a hostname on 127.0.1.1, differing `--nnodes`, a silent listener.
#   Short timeouts make each one fail in seconds; `python -m common.ddp.preflight` names each before launch.
# - An all-reduce costs about α + 2(p − 1)/p · S / B: on slow links the gradient sync, not the compute,
#   sets the step time; accumulation divides it, FSDP multiplies it by 1.5.
#
# ## Further reading
# - [torchrun (Elastic Launch)](https://pytorch.org/docs/stable/elastic/run.html) — `--rdzv-endpoint`,
#   `--nnodes=MIN:MAX` and the `--rdzv-conf` keys (`join_timeout`, `read_timeout`) used here.
# - [torch.distributed: environment variables](https://pytorch.org/docs/stable/distributed.html#common-environment-variables) —
#   `GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`, and choosing the network interface.
# - [Multinode training tutorial](https://pytorch.org/tutorials/intermediate/ddp_series_multinode.html) —
#   the same job launched on real machines, with its troubleshooting list.
# - [DDP notes: gradient bucketing](https://pytorch.org/docs/stable/notes/ddp.html) — how buckets
#   overlap the all-reduce with backward (`bucket_cap_mb`).
# - [NCCL environment variables](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html) —
#   `NCCL_SOCKET_IFNAME`, `NCCL_IB_*` and `NCCL_DEBUG=INFO` for multi-node GPUs.
#
# ## Exercises
# 1. Run the preflight on `node1` with `--endpoint node0:29501` while nothing listens there. Which check
#    fails, and how does its message differ from the firewall's?
# 2. Give `node1` a hosts file in which `node0` is missing. What do the preflight and `torchrun` say?
# 3. Measure the all-reduce at 100 Mbit/s on 2 hosts with `SIZES_KIB = [64, 128, 256]`. Is the fitted
#    latency still near zero? What is the smallest bucket worth sending?
# 4. With the fitted model of the 1 Gbit/s link, how many parameters can a model have before its DDP sync
#    takes longer than a 0.2 s step?

# %% [markdown]
# ## Recall questions
# Answer these from memory first, without running code; then check yourself against the answers in `chapters/exercises/solutions/recall_answers.md`.
#
# 1. What is a network namespace, and what does `Cluster` give each host so that two of them make a real two-host job?
# 2. What must be the same in the `torchrun` command on every node, and what must `--rdzv-endpoint` name?
# 3. The second node is started with `--rdzv-endpoint=localhost:29500`. What happens on each node, and how does the preflight name it?
# 4. Why does a hostname that resolves to 127.0.1.1 break a job across machines, and what are the two fixes?
# 5. A firewall drops the endpoint's port; a silent listener holds it. How do the two symptoms differ, and how does the preflight tell them apart?
# 6. What does `GLOO_SOCKET_IFNAME` (or `NCCL_SOCKET_IFNAME`) choose, and how did setting it to an interface that does not route hang the job?
# 7. What cost model of a ring all-reduce did the chapter fit, and what did the fit give on the slowest and on the fastest link?
# 8. How do gradient accumulation with `no_sync` and FSDP change what crosses the network per optimizer step, compared with plain DDP?
