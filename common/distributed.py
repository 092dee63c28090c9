"""Process-group helpers shared by every script that runs under ``torchrun``.

The same code runs under plain ``python`` (one process, no process group) and under
``torchrun``, which sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
Also here: the samplers a DDP run needs (resumable training shards, exact-once evaluation
shards), a counting communication hook, and helpers that launch ``torchrun`` as a
subprocess (how notebooks and tests start multi-process work).
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.utils.data import DistributedSampler, Sampler


@dataclass(frozen=True)
class DistInfo:
    """Who this process is. ``world_size == 1`` and ``initialized == False`` without torchrun.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str | None
    initialized: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_distributed(*, device_type: str | None = None) -> DistInfo:
    """Join the process group that ``torchrun`` describes in the environment, if any.

    Picks ``nccl`` with CUDA and ``gloo`` otherwise, and calls ``torch.cuda.set_device``
    before ``init_process_group`` so each rank owns one GPU.

    Args:
        device_type: Force "cpu" or "cuda"; default CUDA when available.

    Returns:
        This process's ``DistInfo``.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    use_cuda = (device_type or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError("device_type='cuda' was requested but CUDA is not available")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if "RANK" not in os.environ:
        return DistInfo(0, 0, 1, device, None, False)
    backend = "nccl" if use_cuda else "gloo"
    dist.init_process_group(backend=backend, device_id=device if use_cuda else None)
    return DistInfo(rank, local_rank, world_size, device, backend, True)


def cleanup_distributed() -> None:
    """Destroy the process group if one exists (call it on every exit path).

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def is_main_process() -> bool:
    """True on rank 0, and in a plain single process.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over all ranks (a no-op copy without a process group).

    Use it for counts and sums (correct predictions, samples seen, summed loss), then
    divide: averaging per-rank means is wrong when ranks see different numbers of samples.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    values = values.clone()
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def gather_objects(obj: object) -> list:
    """Every rank's ``obj``, in rank order (``[obj]`` without a process group).

    Used to print the ranks' lines in a fixed order and to collect each rank's RNG state.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


class ShardSampler(Sampler[int]):
    """Rank ``r`` of ``world_size`` gets indices ``r, r + world_size, ...``, in order, no padding.

    ``DistributedSampler`` pads every rank to the same length by repeating samples, so a
    validation set of 13 images on 2 ranks would count one image twice. Evaluation needs
    no equal lengths (no collective runs per batch), so this sampler counts each sample
    exactly once: the per-rank counts sum to ``len(dataset)``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, dataset_size: int, *, rank: int, world_size: int) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must lie in 0..{world_size - 1}, got {rank}")
        self.indices = range(rank, dataset_size, world_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class ResumableDistributedSampler(DistributedSampler):
    """``DistributedSampler`` that can start an epoch part-way through (for resuming).

    ``set_epoch(epoch, start=k)`` skips this rank's first ``k`` indices of that epoch's
    shuffled order, so a run resumed from a mid-epoch snapshot sees exactly the samples
    the interrupted run had not yet seen, in the same order.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        super().set_epoch(epoch)
        if not 0 <= start <= self.num_samples:
            raise ValueError(f"start must lie in 0..{self.num_samples}, got {start}")
        self.start = start

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.start, None)

    def __len__(self) -> int:
        return self.num_samples - self.start


@dataclass
class AllReduceCounter:
    """State of ``counting_allreduce_hook``: how often DDP synchronised gradients.

    ``syncs`` counts completed gradient synchronisations (the last bucket of a backward
    pass); ``bucket_calls`` counts all-reduce calls (one per bucket).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    process_group: object = None
    syncs: int = 0
    bucket_calls: int = 0


# Unannotated on purpose: DDP compares the annotations with dist.GradBucket and Future, and
# ``from __future__ import annotations`` would turn them into strings that fail the check.
def counting_allreduce_hook(state, bucket):  # noqa: ANN001, ANN201
    """A DDP communication hook: the default averaging all-reduce, counted.

    Register it with ``ddp_model.register_comm_hook(AllReduceCounter(), counting_allreduce_hook)``.
    Inside ``ddp_model.no_sync()`` DDP calls no hook at all, which is what makes gradient
    accumulation cheap.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    state.bucket_calls += 1
    if bucket.is_last():
        state.syncs += 1
    return default_hooks.allreduce_hook(state.process_group, bucket)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a rendezvous endpoint).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_command(module: str, args: Sequence[str] = (), *, nproc_per_node: int = 2,
                     nnodes: int = 1, rdzv_endpoint: str | None = None, rdzv_id: str = "job",
                     max_restarts: int = 0) -> list[str]:
    """The ``torchrun ... -m module args`` command line, as a list for ``subprocess``.

    It calls ``python -m torch.distributed.run`` (what the ``torchrun`` script runs) with
    this interpreter, so it uses the same environment as the caller. With one node and no
    endpoint it is ``--standalone`` (a local rendezvous on a free port); otherwise a c10d
    rendezvous at ``rdzv_endpoint`` that ``nnodes`` agents join.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}"]
    if nnodes == 1 and rdzv_endpoint is None:
        command.append("--standalone")
    else:
        if rdzv_endpoint is None:
            raise ValueError(f"nnodes={nnodes} needs an rdzv_endpoint such as 'node0:29500'")
        command += [f"--nnodes={nnodes}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]
    if max_restarts:
        command.append(f"--max-restarts={max_restarts}")
    return command + ["-m", module, *args]


#: Environment for torchrun agents that may restart their workers. By default the agent
#: shares its rendezvous TCPStore with the workers, and a restarted worker group can read
#: the previous attempt's addresses from it and fail to connect ("connectFullMesh failed
#: ... Connection refused"; pytorch/pytorch#135712). A store per attempt avoids that.
RESTART_SAFE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def launch_env(*, threads: int = 1) -> dict[str, str]:
    """This process's environment, plus ``OMP_NUM_THREADS`` (one thread per rank on a CPU)
    and ``RESTART_SAFE_ENV``.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    return {**os.environ, "OMP_NUM_THREADS": str(threads), **RESTART_SAFE_ENV}


def restart_hazard() -> str | None:
    """A warning if this torchrun worker may be restarted into the shared-store bug, else None.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    if restarts > 0 and os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1":
        return ("torchrun --max-restarts > 0 without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: a "
                "restarted worker group may fail to reconnect (pytorch/pytorch#135712); "
                "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 before torchrun")
    return None


def run_command(command: Sequence[str], *, timeout: float = 120,
                threads: int = 1) -> subprocess.CompletedProcess:
    """Run a (``torchrun``) command, wait, and raise with its output if it failed.

    Returns:
        The finished process; ``.stdout`` holds what the ranks printed.

    Raises:
        RuntimeError: Naming the command and showing the end of its output.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                          env=launch_env(threads=threads), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done
