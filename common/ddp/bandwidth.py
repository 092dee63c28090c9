"""All-reduce time against message size and link bandwidth, and what it means for DDP and FSDP.

Three parts:

* a worker, ``python -m common.ddp.bandwidth --sizes 65536,1048576 --repeats 5`` under torchrun:
  every rank times ``dist.all_reduce`` of float32 tensors of those byte sizes, and rank 0 prints
  one JSON line with the medians;
* :func:`measure`, which runs that worker on every host of a :class:`common.ddp.cluster.Cluster`
  at several link rates (each rank limits its own host's ``eth0`` with ``tc ... tbf``);
* the arithmetic: a ring all-reduce of ``S`` bytes over ``p`` hosts sends ``2 (p - 1) / p * S``
  bytes out of every host, so its time is about ``alpha + 2 (p - 1) / p * S / B`` (:func:`fit`
  finds the latency ``alpha`` and the bandwidth ``B`` from measurements), and from that: the
  smallest DDP bucket that hides the latency, the gradient sync that ``no_sync``/gradient
  accumulation saves, and FSDP's extra traffic (:func:`implications`).

Introduced in chapters/04_3_several_machines.ipynb.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

#: Links of real machines, in gigabytes per second per direction, as their makers state them.
INTERCONNECTS = [
    ("1 Gbit/s Ethernet", 0.125, "IEEE 802.3ab"),
    ("10 Gbit/s Ethernet", 1.25, "IEEE 802.3ae"),
    ("InfiniBand HDR, 1 port (200 Gbit/s)", 25.0, "NVIDIA ConnectX-6 datasheet"),
    ("InfiniBand NDR, 1 port (400 Gbit/s)", 50.0, "NVIDIA ConnectX-7 datasheet"),
    ("PCIe 4.0 x16", 32.0, "PCI-SIG, PCIe 4.0 spec: 16 GT/s per lane"),
    ("PCIe 5.0 x16", 64.0, "PCI-SIG, PCIe 5.0 spec: 32 GT/s per lane"),
    ("NVLink 3 (A100, all links of one GPU)", 300.0, "NVIDIA A100 datasheet: 600 GB/s both ways"),
    ("NVLink 4 (H100 SXM, all links of one GPU)", 450.0, "NVIDIA H100 datasheet: 900 GB/s both ways"),
]


def ring_bytes(size: float, hosts: int) -> float:
    """Bytes a ring all-reduce of ``size`` bytes sends out of each of ``hosts`` hosts."""
    return 2 * (hosts - 1) / hosts * size


@dataclass(frozen=True)
class Fit:
    """``seconds = latency + ring_bytes(size, hosts) / bytes_per_s``, fitted by least squares."""

    latency: float
    bytes_per_s: float
    hosts: int

    def seconds(self, size: float) -> float:
        return self.latency + ring_bytes(size, self.hosts) / self.bytes_per_s


def fit(sizes: Sequence[float], seconds: Sequence[float], hosts: int) -> Fit:
    """The latency and bandwidth that best explain ``seconds`` for ``sizes`` (least squares on
    the bytes each host sends); the latency is not let below 0."""
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError("fit needs at least two (size, seconds) pairs")
    xs = [ring_bytes(size, hosts) for size in sizes]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(seconds)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, seconds, strict=True)) / spread
    if slope <= 0:
        raise ValueError("the times do not grow with the size: no bandwidth to fit")
    latency = max(0.0, mean_y - slope * mean_x)
    return Fit(latency, 1 / slope, hosts)


@dataclass(frozen=True)
class Implications:
    bucket_bytes: float          # smallest bucket whose transfer is 9x its latency
    sync_seconds: float          # one DDP gradient all-reduce of the model (its buckets)
    accumulated_seconds: float   # the same, per micro-batch, with no_sync over `accumulate`
    fsdp_seconds: float          # FSDP's all-gathers and reduce-scatter of the same model
    fsdp_extra_bytes: float      # FSDP's bytes per host beyond DDP's


def implications(model: Fit, params: int, *, bucket_bytes: float = 25 * 2**20,
                 accumulate: int = 4, bytes_per_param: int = 4) -> Implications:
    """What the fitted link means for a model of ``params`` parameters: its gradient sync under
    DDP (buckets of ``bucket_bytes``, torch's default 25 MiB), the same with ``no_sync`` for
    ``accumulate - 1`` of every ``accumulate`` micro-batches, and under FSDP, which all-gathers
    the parameters in forward and in backward and reduce-scatters the gradients (each of them
    ``(p - 1) / p * S`` per host: 3/2 of DDP's all-reduce)."""
    size = params * bytes_per_param
    buckets = max(1, -(-size // int(bucket_bytes)))
    sync = buckets * model.latency + ring_bytes(size, model.hosts) / model.bytes_per_s
    ddp_bytes = ring_bytes(size, model.hosts)
    fsdp_bytes = 1.5 * ddp_bytes
    # alpha <= 10% of the transfer: ring_bytes(bucket) / B >= 9 alpha
    smallest = 9 * model.latency * model.bytes_per_s / (2 * (model.hosts - 1) / model.hosts)
    return Implications(smallest, sync, sync / accumulate,
                        3 * buckets * model.latency + fsdp_bytes / model.bytes_per_s,
                        fsdp_bytes - ddp_bytes)


# -- the worker (under torchrun) ---------------------------------------------------------------

def positive_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of byte counts (e.g. "
                                         "65536,1048576)") from None
    if not sizes or any(size < 4 or size % 4 for size in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: each size must be a positive multiple of 4 "
                                         "bytes (float32)")
    return sizes


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def shape(interface: str, mbit: float) -> None:
    """Limit what this host sends through ``interface`` to ``mbit`` Mbit/s (0: no limit): a token
    bucket (``tc qdisc replace ... tbf``) whose burst holds 1 ms of traffic. Needs root."""
    import subprocess

    if mbit == 0:
        subprocess.run(["tc", "qdisc", "del", "dev", interface, "root"], capture_output=True)
        return
    burst = max(64 * 1024, int(mbit * 1e6 / 8 / 1000))
    subprocess.run(["tc", "qdisc", "replace", "dev", interface, "root", "tbf", "rate",
                    f"{mbit}mbit", "burst", str(burst), "latency", "100ms"], check=True,
                   capture_output=True)


def worker(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m common.ddp.bandwidth",
                                     description="Time all_reduce of float32 tensors on every rank "
                                                 "(run under torchrun; rank 0 prints JSON lines).")
    parser.add_argument("--sizes", type=positive_sizes, required=True,
                        help="message sizes in bytes, comma-separated")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed all-reduces per size (median reported), after one warm-up")
    parser.add_argument("--rates-mbit", type=positive_sizes_or_zero, default=[0],
                        help="link rates to measure at, Mbit/s, comma-separated (0: no limit); "
                             "each rank limits its host's --interface with tc (root)")
    parser.add_argument("--interface", default="eth0", help="the interface to limit (eth0)")
    args = parser.parse_args(argv)
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    for mbit in args.rates_mbit:
        if args.rates_mbit != [0]:
            shape(args.interface, mbit)
        dist.barrier()
        medians = []
        for size in args.sizes:
            tensor = torch.ones(size // 4)
            dist.all_reduce(tensor)  # warm-up: connections, buffers
            times = []
            for _ in range(args.repeats):
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(tensor)
                times.append(time.perf_counter() - start)
            medians.append(statistics.median(times))
        if dist.get_rank() == 0:
            print(json.dumps({"hosts": dist.get_world_size(), "mbit": mbit, "sizes": args.sizes,
                              "seconds": medians}), flush=True)
    if args.rates_mbit != [0]:
        shape(args.interface, 0)
    dist.destroy_process_group()
    return 0


def positive_sizes_or_zero(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of whole numbers") from None
    if not values or any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"{text!r}: rates are >= 0 (0: no limit)")
    return values


def measure(cluster, hosts: int, sizes: Sequence[int], rates_mbit: Sequence[int], *,
            repeats: int = 3, port: int = 29600, timeout: float = 600,
            env: dict[str, str] | None = None) -> list[dict]:
    """Run the worker on the first ``hosts`` hosts of ``cluster`` (one rank each), once per rate
    in ``rates_mbit`` (Mbit/s; 0: no limit); rank 0's records, one per rate."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={hosts}",
               "--nproc-per-node=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint={cluster.hosts[0].name}:{port}", f"--rdzv-id=bw{hosts}",
               "-m", "common.ddp.bandwidth", "--sizes", ",".join(map(str, sizes)),
               "--repeats", str(repeats), "--rates-mbit", ",".join(map(str, rates_mbit))]
    agents = [cluster.popen(i, command, env={"OMP_NUM_THREADS": "1", **(env or {})})
              for i in range(hosts)]
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=timeout))
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.communicate()
        cluster.set_rate(None)
    for agent, (_out, err) in zip(agents, outputs, strict=True):
        if agent.returncode != 0:
            raise RuntimeError(f"the all-reduce benchmark failed ({agent.returncode}):\n{err[-2000:]}")
    return [json.loads(line) for line in outputs[0][0].splitlines() if line.startswith("{")]


if __name__ == "__main__":
    sys.exit(worker())
