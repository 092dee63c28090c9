"""The settings of ``common.ddp.train`` as a dataclass; the command line is built from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common.annotations import csv_flag_problems
from common.cli import (
    at_least,
    distinct_files,
    finite,
    in_range,
    is_dir,
    is_file,
    is_file_or_absent,
    non_negative,
    option,
    parse_dataclass_args,
    positive,
)
from common.ddp.normalization import normalize_option, resize_option
from common.images.layouts import DataLayoutError, layout_of
from common.images.pixels import ORIENTATIONS
from common.models import model_problem


@dataclass
class RunSettings:
    """What ``common.ddp.train`` and ``common.fsdp.train`` share: data, model size, optimizer, schedule.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    data: str = option("", "your images: a folder in the shapes layout (train/labels.csv + "
                       "train/images/, val/ alike; common.ensure_data) or an ImageFolder root "
                       "(train/<class>/*, val/<class>/*) (default: the repo's data/shapes)")
    train_csv: str = option("", "the guide's layout instead of --data: the training images' "
                            "annotations CSV (file_name,label; integer labels 0..K-1 or names)")
    train_images: str = option("", "the folder --train-csv's file names are relative to")
    val_csv: str = option("", "the validation images' annotations CSV (the training classes)")
    val_images: str = option("", "the folder --val-csv's file names are relative to")
    model: str = option("small_cnn", "small_cnn, or a torchvision classification model by its "
                        "builder name (resnet18, mobilenet_v3_small, ...): random weights, the "
                        "data's classes")
    weights: str = option("", "start from this state_dict file (e.g. a run's --save-final; "
                          "local, loaded strictly)")
    num_epochs: int = option(3, "number of epochs")
    batch_size: int = option(64, "GLOBAL batch per optimizer step, split over ranks and --grad-accum")
    optimizer: str = option("adamw", "adamw, or sgd (with momentum)", choices=("adamw", "sgd"))
    lr: float = option(3e-3, "peak learning rate")
    schedule: str = option("cosine", "per optimizer step: cosine decay from --lr, or onecycle (warm up "
                         "to --lr over the first 30%, then anneal)", choices=("cosine", "onecycle"))
    momentum: float = option(0.9, "SGD momentum")
    weight_decay: float = option(5e-4, "weight decay")
    seed: int = option(0, "seed of weights, shuffling and augmentation")
    num_workers: int = option(0, "DataLoader worker processes per rank")
    data_pipeline: str = option("decode", "decode: every JPEG decoded per sample (Chapter 2); cache: "
                                "Chapter 3's uint8 cache, normalized per batch (needs --no-augment)",
                                choices=("decode", "cache"))
    image_size: int = option(64, "side of the square training images")
    resize: str = resize_option()
    normalize: str = normalize_option()
    orientation: str = option("exif", "exif: photos turned upright as viewers show them (the EXIF "
                              "Orientation tag); raw: the pixels as stored", choices=ORIENTATIONS)
    width: int = option(16, "channels of SmallCNN's first block (--model small_cnn)")
    augment: bool = option(True, "random resized crops and flips, pytorch/examples' recipe (seeded "
                           "per sample)")
    subset: int = option(0, "use only the first N training and N // 2 validation images (0: all)")
    grad_accum: int = option(1, "micro-batches per optimizer step (gradients synchronised on the "
                             "last only: no_sync)")
    max_steps: int = option(0, "stop after this many optimizer steps (0: run all epochs)")


@dataclass
class TrainConfig(RunSettings):
    """Every setting of a run; each field is a command-line flag (``batch_size`` -> ``--batch-size``).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    norm: str = option("batch", "batch: per-rank BatchNorm; syncbatch: SyncBatchNorm (GPU); "
                     "group: GroupNorm (no batch statistics)", choices=("batch", "syncbatch", "group"))
    snapshot: str = option("", "snapshot file: resumed from if it exists, rewritten as the run goes")
    snapshot_every: int = option(0, "also snapshot every N optimizer steps (0: at epoch ends only)")
    save_final: str = option("", "write the final model state_dict here")
    log_file: str = option("", "append JSON lines (one per event) to this file, from rank 0")
    amp: bool = option(False, "bfloat16 autocast (CUDA only)")
    threads: int = option(0, "torch threads per process (0: leave the default)")
    simulate_failure_at_step: int = option(0, "the last rank exits at this step of the first attempt")
    step_delay: float = option(0.0, "sleep after each step (s), so a demo can interrupt a run")
    count_allreduces: bool = option(False, "count gradient all-reduces with a DDP comm hook")
    tiny: bool = option(False, "a configuration small enough for tests (flags given still win)")


#: Settings a run resumed from a snapshot may change; every other one must equal the
#: snapshot's (``common.ddp.snapshot.check_settings``). ``num_epochs`` extends or shortens a
#: run: the learning-rate schedule is then rebuilt for the new length at the saved step.
#: The world size (not a flag) may change too, also mid-epoch: the samples consumed so far
#: are a prefix of the epoch's shuffled order on any number of ranks.
RESUME_MAY_CHANGE = frozenset({
    "num_epochs", "num_workers", "max_steps", "snapshot", "snapshot_every", "save_final",
    "log_file", "threads", "simulate_failure_at_step", "step_delay", "count_allreduces", "tiny"})

TINY = {"optimizer": "sgd", "lr": 0.05, "num_epochs": 2, "batch_size": 8, "image_size": 32,
        "width": 4, "norm": "group", "subset": 48}


#: SmallCNN halves its input three times (three 2x2 max-pools): a side below 8 leaves nothing.
MIN_IMAGE_SIZE = 8


def run_problems(config: RunSettings) -> dict[str, str]:
    """Problems of the settings ``common.ddp.train`` and ``common.fsdp.train`` share, by field.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {**at_least(config, MIN_IMAGE_SIZE, "image_size", why="SmallCNN halves it three times"),
            **positive(config, "num_epochs", "batch_size", "grad_accum", "image_size", "width"),
            **non_negative(config, "max_steps", "num_workers", "subset", "lr", "weight_decay",
                           "momentum", "seed"),
            **in_range(config, "momentum", 0.0, 0.999),  # 1 or more: steps grow without bound
            **finite(config, "lr", "momentum", "weight_decay"),
            **is_dir(config, "data", "train_images", "val_images"),
            **is_file(config, "train_csv", "val_csv", "weights"),
            **data_problem(config), **csv_flag_problems(config),
            **({"model": problem} if (problem := model_problem(config.model)) else {}),
            **pipeline_problem(config)}


def data_problem(config: RunSettings) -> dict[str, str]:
    """``--data DIR`` must be in a layout the trainers read (``common.images.layouts.layout_of``).

    Introduced in docs/scripts.md ("Your own images").
    """
    if not config.data or not Path(config.data).is_dir():
        return {}  # nothing given (the shapes), or is_dir's problem
    try:
        layout_of(Path(config.data))
    except DataLayoutError as error:
        return {"data": str(error)}
    return {}


def check_config(config: TrainConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field (empty when it is valid).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {**run_problems(config),
            **non_negative(config, "snapshot_every", "threads", "simulate_failure_at_step",
                           "step_delay"),
            **finite(config, "step_delay"),
            **is_file_or_absent(config, "snapshot", "save_final", "log_file"),
            **distinct_files(config, "snapshot", "save_final", "log_file")}


def pipeline_problem(config) -> dict[str, str]:
    """``--data-pipeline cache`` holds eval crops: it cannot augment per sample.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if config.data_pipeline == "cache" and config.augment:
        return {"data_pipeline": "cache stores eval crops (decoded once): add --no-augment"}
    return {}


def parse_config(argv: Sequence[str] | None = None) -> TrainConfig:
    """Flags -> ``TrainConfig``; ``--tiny`` fills in ``TINY`` where no flag was given.

    Invalid values are argparse errors (exit status 2) that name the flag.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return parse_dataclass_args(TrainConfig, argv, description="Train SmallCNN (or --model) with DDP "
                                "(python -m common.ddp.train)", presets={"tiny": TINY},
                                validate=check_config)
