"""The settings of ``common.fsdp.train`` as a dataclass; the command line is built from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from common.cli import (
    distinct_files,
    finite,
    is_dir_or_absent,
    is_file_or_absent,
    non_negative,
    option,
    parse_dataclass_args,
    positive,
)
from common.ddp.config import RESUME_MAY_CHANGE as DDP_MAY_CHANGE
from common.ddp.config import RunSettings, run_problems


@dataclass
class FSDPTrainConfig(RunSettings):
    """Every setting of a run; each field is a command-line flag (``batch_size`` -> ``--batch-size``).

    ``width`` builds SmallCNN with GroupNorm instead of BatchNorm (no batch statistics to shard).

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """

    strategy: str = option("fsdp", "fsdp: shard parameters, gradients and optimizer state "
                           "(fully_shard); ddp: replicate them (DistributedDataParallel)",
                           choices=("fsdp", "ddp"))
    checkpoint: str = option("", "distributed-checkpoint folder: resumed from its newest "
                             "step-NNNNNN if any, written at epoch ends")
    checkpoint_every: int = option(0, "also checkpoint every N optimizer steps (0: epoch ends only)")
    keep: int = option(2, "complete checkpoints to keep")
    async_save: bool = option(False, "write checkpoints with dcp.async_save while training goes "
                              "on; each is published when the next save (or the end) waits for it")
    save_final: str = option("", "write the final full model state_dict here (torch.save)")
    log_file: str = option("", "append JSON lines (one per event) to this file, from rank 0")
    compile: bool = option(False, "torch.compile the model's forward (and so its backward)")
    reshard_after_forward: bool = option(True, "FSDP: free gathered parameters after forward "
                                         "(ZeRO-3); --no-... keeps them until backward")
    bf16: bool = option(False, "FSDP: bfloat16 MixedPrecisionPolicy (CUDA only)")
    threads: int = option(0, "torch threads per process (0: leave the default)")
    simulate_kill_at_step: int = option(0, "the last rank SIGKILLs itself after this step "
                                        "(first attempt only)")
    kill_in_save: bool = option(False, "with --simulate-kill-at-step: die inside that step's "
                                "checkpoint, after writing, before publishing it")
    step_delay: float = option(0.0, "sleep after each step (s), so a demo can interrupt a run")
    tiny: bool = option(False, "a configuration small enough for tests (flags given still win)")


#: Settings a run resumed from a checkpoint may change: the DDP trainer's list (those of its
#: flags this trainer has: --num-epochs, with the schedule rebuilt, --num-workers, outputs,
#: threads), and how checkpoints are written and the model is run, which leave the arithmetic
#: as it was. Every other setting, and the data, must be the checkpoint's
#: (``common.fsdp.resume``). The world size may change too (resharding).
RESUME_MAY_CHANGE = frozenset(
    DDP_MAY_CHANGE & {item.name for item in fields(FSDPTrainConfig)}
    | {"checkpoint", "checkpoint_every", "keep", "async_save", "compile", "strategy",
       "reshard_after_forward", "simulate_kill_at_step", "kill_in_save"})

#: Settings the ranks of one job may hold differently (each agent's own command line): they
#: change how fast a rank runs, not what it computes. Every other one must be rank 0's
#: (``common.fsdp.elastic.agree_on_settings``), or the ranks would compute different runs or
#: wait for each other's collectives forever.
RANK_MAY_DIFFER = frozenset({"num_workers", "threads", "step_delay", "tiny"})

TINY = {"num_epochs": 2, "batch_size": 12, "image_size": 32, "width": 4, "subset": 48,
        "augment": False}


def check_config(config: FSDPTrainConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field (empty when it is valid).

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    problems = {**run_problems(config), **positive(config, "keep"),
                **non_negative(config, "checkpoint_every", "threads", "simulate_kill_at_step",
                               "step_delay"),
                **finite(config, "step_delay"),
                **is_dir_or_absent(config, "checkpoint"),
                **is_file_or_absent(config, "save_final", "log_file"),
                **distinct_files(config, "checkpoint", "save_final", "log_file")}
    if config.kill_in_save and not config.simulate_kill_at_step:
        problems["kill_in_save"] = "needs --simulate-kill-at-step N"
    if config.bf16 and config.strategy != "fsdp":
        problems["bf16"] = "is FSDP's MixedPrecisionPolicy; use --strategy fsdp"
    return problems


def parse_config(argv: Sequence[str] | None = None) -> FSDPTrainConfig:
    """Flags -> ``FSDPTrainConfig``; ``--tiny`` fills in ``TINY`` where no flag was given.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    return parse_dataclass_args(FSDPTrainConfig, argv,
                                description="Train SmallCNN (or --model) with FSDP2 or DDP "
                                "(python -m common.fsdp.train)", presets={"tiny": TINY},
                                validate=check_config)
