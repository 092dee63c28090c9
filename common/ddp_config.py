"""The settings of ``common.ddp_train`` as a dataclass, and the command line built from it."""

from __future__ import annotations

import argparse
import typing
from dataclasses import dataclass, field, fields


def _opt(default, help: str, **extra):  # noqa: A002 - argparse's own word
    return field(default=default, metadata={"help": help, **extra})


@dataclass
class TrainConfig:
    """Every setting of a run; each field is a command-line flag (``batch_size`` -> ``--batch-size``).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    data: str = _opt("", "dataset folder from common.ensure_data (default: the repo's data/shapes)")
    epochs: int = _opt(3, "number of epochs")
    batch_size: int = _opt(64, "GLOBAL batch per optimizer step, split over ranks and --grad-accum")
    optimizer: str = _opt("adamw", "adamw, or sgd (with momentum)", choices=("adamw", "sgd"))
    lr: float = _opt(3e-3, "peak learning rate")
    schedule: str = _opt("cosine", "per optimizer step: cosine decay from --lr, or onecycle (warm up "
                         "to --lr over the first 30%, then anneal)", choices=("cosine", "onecycle"))
    momentum: float = _opt(0.9, "SGD momentum")
    weight_decay: float = _opt(5e-4, "weight decay")
    seed: int = _opt(0, "seed of weights, shuffling and augmentation")
    num_workers: int = _opt(0, "DataLoader worker processes per rank")
    image_size: int = _opt(64, "side of the square training images")
    width: int = _opt(16, "channels of SmallCNN's first block")
    norm: str = _opt("batch", "batch: per-rank BatchNorm; syncbatch: SyncBatchNorm (GPU); "
                     "group: GroupNorm (no batch statistics)", choices=("batch", "syncbatch", "group"))
    augment: bool = _opt(True, "random crops, flips, rotations, colour jitter (seeded per sample)")
    subset: int = _opt(0, "use only the first N training and N // 2 validation images (0: all)")
    grad_accum: int = _opt(1, "micro-batches per optimizer step (no_sync on all but the last)")
    max_steps: int = _opt(0, "stop after this many optimizer steps (0: run all epochs)")
    snapshot: str = _opt("", "snapshot file: resumed from if it exists, rewritten as the run goes")
    snapshot_every: int = _opt(0, "also snapshot every N optimizer steps (0: at epoch ends only)")
    save_final: str = _opt("", "write the final model state_dict here")
    log_file: str = _opt("", "append JSON lines (one per event) to this file, from rank 0")
    amp: bool = _opt(False, "bfloat16 autocast (CUDA only)")
    threads: int = _opt(0, "torch threads per process (0: leave the default)")
    simulate_failure_at_step: int = _opt(0, "the last rank exits at this step of the first attempt")
    step_delay: float = _opt(0.0, "sleep after each step (s), so a demo can interrupt a run")
    count_allreduces: bool = _opt(False, "count gradient all-reduces with a DDP comm hook")
    tiny: bool = _opt(False, "a configuration small enough for tests (flags given still win)")


TINY = {"optimizer": "sgd", "lr": 0.05, "epochs": 2, "batch_size": 8, "image_size": 32, "width": 4, "norm": "group", "subset": 48}


def build_parser() -> argparse.ArgumentParser:
    """An argparse parser with one flag per ``TrainConfig`` field; unset flags stay absent.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    parser = argparse.ArgumentParser(description="Train SmallCNN with DDP (common.ddp_train)",
                                     argument_default=argparse.SUPPRESS)
    hints = typing.get_type_hints(TrainConfig)
    for item in fields(TrainConfig):
        flag = "--" + item.name.replace("_", "-")
        text = f"{item.metadata['help']} (default: {item.default!r})"
        if hints[item.name] is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=text)
        else:
            parser.add_argument(flag, type=hints[item.name], help=text,
                                choices=item.metadata.get("choices"))
    return parser


def parse_config(argv: list[str] | None = None) -> TrainConfig:
    """Flags -> ``TrainConfig``; ``--tiny`` fills in ``TINY`` where no flag was given.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    given = vars(build_parser().parse_args(argv))
    config = TrainConfig(**{**(TINY if given.get("tiny") else {}), **given})
    if config.grad_accum < 1 or config.batch_size < 1 or config.epochs < 1:
        raise ValueError("--batch-size, --epochs and --grad-accum must be at least 1")
    return config
