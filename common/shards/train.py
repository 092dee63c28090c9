"""Train ``SmallCNN`` (or ``--model``) from tar shards with DDP; every rank streams its own shards.

One process, then two (CPU: gloo; CUDA: nccl, one GPU per rank)::

    python -m common.shards.train                       # data/shards/{train,val}
    torchrun --standalone --nproc_per_node=2 -m common.shards.train --out runs/shards.json
    torchrun --standalone --nproc_per_node=2 -m common.shards.train --tiny ...  # tests

``--shards``/``--val-shards`` default to ``default_data_root() / "shards" / {train,val}``
(``$COMPANION_DATA`` if set, else the repository's data/).

Make the shards first with ``python data_scripts/make_shards.py`` (``--imagefolder DIR`` for your
own images: the manifest then lists their classes, which set the class count). Rank 0 prints the
batches every rank ran in each epoch (they must be equal, or DDP would hang) and
evaluates on the validation shards.

``--snapshot PATH`` is written at the end of every epoch and resumed from when it exists, under
the DDP trainer's contract (``common.ddp.snapshot.check_resume``): the settings and the shards
(every name and sha256 of both manifests) must be the snapshot's, except what
``RESUME_MAY_CHANGE`` lists; a longer ``--num-epochs`` extends an ended run, and says so.
``--snapshot-every N`` writes it every N steps too: a run stopped mid-epoch then goes on from
its last snapshot by sample offset (``ShardedImageDataset.state_dict``, kept beside the snapshot
in ``<snapshot>.data.json``), reading and decoding only the rest of the epoch, to the weights
of the uninterrupted run; ``--max-steps`` stops a run after that many steps (to try it).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from common.annotations import BadSampleError
from common.cli import (
    at_least,
    distinct_files,
    fail,
    finite,
    is_file,
    is_file_or_absent,
    non_negative,
    option,
    parse_dataclass_args,
    positive,
)
from common.ddp.config import MIN_IMAGE_SIZE
from common.ddp.config import RESUME_MAY_CHANGE as DDP_MAY_CHANGE
from common.ddp.data import CropFlip, NormalizeCollate
from common.ddp.normalization import normalization, normalize_option, resize_option
from common.ddp.process_group import (
    DistInfo,
    all_reduce_sum,
    cleanup_distributed,
    is_main_process,
    setup_distributed,
    unwrap,
    wrap_model,
)
from common.ddp.snapshot import Position, check_resume, load_snapshot, read_snapshot, save_snapshot
from common.images.layouts import class_identity
from common.models import SMALL_CNN, check_input_size, create_model, load_weights, model_problem
from common.paths import default_data_root
from common.shapes import CLASSES
from common.shards import MANIFEST_NAME, ShardedImageDataset, ShardInfo, read_manifest
from common.shards.pixels import SquaredFirst, shard_statistics
from common.training import evaluate, train_one_epoch
from common.transforms import V2EvalPreset


@dataclass
class ShardTrainConfig:
    """Options of one run (``--tiny`` shrinks them for tests).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    shards: str = option("", "training shards (default: <data>/shards/train)")
    val_shards: str = option("", "validation shards (default: <data>/shards/val)")
    num_classes: int | None = option(None, "number of classes (default: the manifest's class "
                                     "names; 6, the shapes', for a manifest without)")
    model: str = option("small_cnn", "small_cnn, or a torchvision classification model by its "
                        "builder name (resnet18, ...): random weights")
    weights: str = option("", "start from this state_dict file (local, loaded strictly)")
    image_size: int = option(64, "side of the square training images")
    resize: str = resize_option()
    normalize: str = normalize_option()
    batch_size: int = option(32, "batch per rank")
    num_epochs: int = option(3, "number of epochs")
    lr: float = option(3e-3, "Adam learning rate")
    augment: bool = option(True, "random resized crops and flips (pytorch/examples' recipe, seeded "
                           "per sample)")
    num_workers: int = option(0, "DataLoader worker processes per rank")
    buffer_size: int = option(256, "shuffle buffer (samples per worker)")
    equalize: str = option("pad", "equal batches per rank: pad, drop, or none",
                           choices=("pad", "drop", "none"))
    seed: int = option(0, "seed of weights and shuffling")
    allow_duplicate_keys: bool = option(False, "accept a sample key found in two shards "
                                        "(oversampling on purpose); refused by default, "
                                        "naming both shards")
    out: str = option("", "write the run's history here as JSON (rank 0)")
    snapshot: str = option("", "snapshot file, written after every epoch; resumed from if it "
                           "exists (same settings and shards required)")
    snapshot_every: int = option(0, "also write --snapshot every N steps, mid-epoch (0: at the "
                                 "end of each epoch only)")
    max_steps: int = option(0, "stop after this many steps in all (0: run every epoch)")
    tiny: bool = option(False, "a configuration small enough for tests (flags given still win)")

    def __post_init__(self) -> None:
        root = default_data_root() / "shards"
        self.shards = self.shards or str(root / "train")
        self.val_shards = self.val_shards or str(root / "val")


TINY = {"image_size": 32, "batch_size": 4, "num_epochs": 2, "buffer_size": 8}

#: Settings a resumed run may change: the DDP trainer's (``common.ddp.config``), as far as this
#: trainer has them, and its output ``--out``. The world size may change too. Every other
#: setting, and the shards, must be the snapshot's.
RESUME_MAY_CHANGE = frozenset(DDP_MAY_CHANGE & {item.name for item in fields(ShardTrainConfig)}
                              | {"out"})


def check_config(config: ShardTrainConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field (empty when it is valid).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    return {**positive(config, "num_epochs", "batch_size", "buffer_size"),
            **(positive(config, "num_classes") if config.num_classes is not None else {}),
            **at_least(config, MIN_IMAGE_SIZE, "image_size", why="SmallCNN halves it three times"),
            **is_file(config, "weights"),
            **({"model": problem} if (problem := model_problem(config.model)) else {}),
            **non_negative(config, "num_workers", "lr", "seed", "snapshot_every", "max_steps"),
            **finite(config, "lr"),
            **is_file_or_absent(config, "out", "snapshot"),
            **distinct_files(config, "snapshot", "out")}


def parse_args(argv: Sequence[str] | None = None) -> ShardTrainConfig:
    """Flags -> ``ShardTrainConfig``; ``--tiny`` fills in ``TINY`` where no flag was given.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    return parse_dataclass_args(ShardTrainConfig, argv, description=__doc__.splitlines()[0],
                                presets={"tiny": TINY}, validate=check_config)


def read_shards(config: ShardTrainConfig, name: str) -> list[ShardInfo]:
    """The manifest behind ``--shards``/``--val-shards``, its labels bounded by the class count.

    The class count is ``--num-classes``, else the manifest's class names, else the shapes' 6.
    A manifest that lists more classes than ``--num-classes`` is refused before training
    (the loss would fail on the first label past the last logit); without ``classes``
    every label is checked against the count as it is read.

    Raises:
        ValueError: Naming the flag.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    flag = "--" + name.replace("_", "-")
    try:
        shards = read_manifest(getattr(config, name))
    except (FileNotFoundError, ValueError) as error:  # ShardError is a ValueError
        raise ValueError(f"{flag}: {error}") from error
    known = max((shard.num_classes or 0) for shard in shards)
    if config.num_classes is not None and known > config.num_classes:
        raise ValueError(f"--num-classes {config.num_classes} is fewer than the {known} classes "
                         f"of the manifest behind {flag} {getattr(config, name)}")
    count = config.num_classes or known or len(CLASSES)
    return [dataclasses.replace(shard, num_classes=shard.num_classes or count)
            for shard in shards]


def shard_classes(config: ShardTrainConfig) -> tuple[str, ...]:
    """The class names of the ``--shards`` manifest (empty if it lists none).

    Raises:
        ValueError: If the ``--val-shards`` manifest names other classes (its labels would
            mean other classes than the training labels).

    Introduced in docs/scripts.md ("Your own images").
    """
    train, val = (_manifest_classes(getattr(config, name)) for name in ("shards", "val_shards"))
    if val and val != train:
        raise ValueError(f"--val-shards {config.val_shards}: its manifest's classes {list(val)} "
                         f"are not those of --shards {config.shards} ({list(train)})")
    return train


def _manifest_classes(path: str) -> tuple[str, ...]:
    manifest = Path(path) / MANIFEST_NAME if Path(path).is_dir() else Path(path)
    return tuple(json.loads(manifest.read_text(encoding="utf-8")).get("classes") or ())


class CountingLoader:
    """Wrap a loader and count the batches it yields (to show equal counts per rank).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    def __init__(self, loader: DataLoader) -> None:
        self.loader, self.batches, self.samples = loader, 0, 0

    def __iter__(self):
        self.batches = self.samples = 0
        for images, labels in self.loader:
            self.batches += 1
            self.samples += len(labels)
            yield images, labels


def build_loaders(config: ShardTrainConfig, info: DistInfo, *,
                  shards: tuple[list[ShardInfo], list[ShardInfo]] | None = None
                  ) -> tuple[DataLoader, DataLoader]:
    """The train loader over this rank's shards, and the validation loader (all shards).

    Every picture is made square by ``--resize`` first, and normalized with ``--normalize``'s
    mean and std (the training shards' own: ``common.shards.statistics``), as in the DDP trainer.
    ``shards``: the two manifests' ``read_shards`` if already read.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    train_shards, val_shards = shards or (read_shards(config, "shards"),
                                          read_shards(config, "val_shards"))
    size = config.image_size
    norm = normalization(config, lambda: shard_statistics(train_shards, size, config.resize,
                                                          Path(config.shards)))
    norm = {"mean": norm["mean"], "std": norm["std"]}
    eval_tf = SquaredFirst(config.resize, V2EvalPreset(resize_size=size, crop_size=size, **norm))
    # Augmented: the DDP trainer's crop and flip to uint8, the batch normalized last.
    train_tf = SquaredFirst(config.resize, CropFlip(size, scale=(0.6, 1.0))) if config.augment else eval_tf
    train_set = ShardedImageDataset(
        train_shards, train_tf,
        buffer_size=config.buffer_size, seed=config.seed, rank=info.rank,
        world_size=info.world_size, equalize=config.equalize,
        allow_duplicate_keys=config.allow_duplicate_keys, batch_size=config.batch_size,
        seeded=True)
    val_set = ShardedImageDataset(
        val_shards, eval_tf, shuffle=False, rank=0, world_size=1, equalize="none",
        allow_duplicate_keys=config.allow_duplicate_keys)
    pin = info.device.type == "cuda"
    return (DataLoader(train_set, batch_size=config.batch_size, num_workers=config.num_workers,
                       pin_memory=pin, collate_fn=NormalizeCollate(**norm) if config.augment else None),
            DataLoader(val_set, batch_size=2 * config.batch_size, pin_memory=pin))


def build_model(config: ShardTrainConfig, info: DistInfo, num_classes: int) -> torch.nn.Module:
    """``--model`` (and ``--weights``) on this rank's device, wrapped in DDP when a process
    group exists."""
    model = create_model(config.model, num_classes)
    if config.weights:
        load_weights(model, config.weights)
    if config.model != SMALL_CNN:
        check_input_size(model, config.image_size, name=config.model)
    return wrap_model(model.to(info.device), info)


def run_epoch(model, loader: CountingLoader, optimizer, info: DistInfo) -> dict:
    """Train one epoch; returns what every rank did (gathered with ``all_reduce_sum``)."""
    start = time.perf_counter()
    loss, acc = train_one_epoch(model, loader, optimizer, info.device, progress=False)
    counts = torch.zeros(2, info.world_size, dtype=torch.int64, device=info.device)
    counts[:, info.rank] = torch.tensor([loader.batches, loader.samples])
    counts = all_reduce_sum(counts).cpu()
    return {"batches_per_rank": counts[0].tolist(), "samples_per_rank": counts[1].tolist(),
            "train_loss": loss, "train_acc": acc, "seconds": time.perf_counter() - start}


def data_identity(train_loader: DataLoader, val_loader: DataLoader,
                  classes: tuple[str, ...] = ()) -> dict[str, str]:
    """``{"--shards shard-000000.tar": sha256, ..., "classes": "cat, dog"}``: the data a
    snapshot belongs to (the class names if the manifest lists them).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    return {**{f"{flag} {shard.path.name}": shard.sha256 or ""
               for flag, loader in (("--shards", train_loader), ("--val-shards", val_loader))
               for shard in loader.dataset.shards},
            **(class_identity(classes) if classes else {})}


def resume(config: ShardTrainConfig, info: DistInfo, model: torch.nn.Module,
           optimizer: torch.optim.Optimizer, identity: dict[str, str]) -> Position:
    """Continue from ``--snapshot``: settings, shards and ``--num-epochs`` checked first.

    Raises:
        SnapshotError: Naming each setting or shard that differs (nothing modified).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    snapshot = read_snapshot(config.snapshot)
    changed = check_resume(config.snapshot, snapshot, asdict(config),
                           may_change=RESUME_MAY_CHANGE, identity=identity)
    position = load_snapshot(config.snapshot, model=model, optimizer=optimizer, rank=info.rank,
                             snapshot=snapshot)
    state = read_data_state(config.snapshot, position) if position.batch_in_epoch else None
    if is_main_process():
        print(resume_line(config, snapshot["settings"]["num_epochs"], position.epoch, changed,
                          step=position.step, state=state), flush=True)
    return position


def resume_line(config: ShardTrainConfig, saved_epochs: int, done: int, changed: bool, *,
                step: int = 0, state: dict | None = None) -> str:
    """What a resume says: where it continues, and an extended or ended run as such.

    ``state``: the shards' position of a snapshot taken mid-epoch ``done`` at ``step``.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    line = f"resumed from {config.snapshot} after epoch {done} of {saved_epochs}"
    if state is not None:
        line = (f"resumed from {config.snapshot} in epoch {done} after step {step} "
                f"({', '.join(map(str, state['consumed']))} samples of each rank read)")
    if changed:
        verb = "extends" if config.num_epochs > saved_epochs else "shortens"
        line += f"; --num-epochs {saved_epochs} -> {config.num_epochs} {verb} the run"
    if done >= config.num_epochs:
        line += ("; the run has ended: nothing to train (a larger --num-epochs would extend "
                 "it)")
    return line


def train(config: ShardTrainConfig, *,
          shards: tuple[list[ShardInfo], list[ShardInfo]] | None = None) -> list[dict]:
    """Run ``config``; returns one record per epoch trained (rank 0 adds validation metrics).

    ``shards``: the ``--shards`` and ``--val-shards`` manifests, if ``main`` has read them.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    torch.manual_seed(config.seed)  # the same initial weights on every rank
    info = setup_distributed()
    try:
        train_loader, val_loader = build_loaders(config, info, shards=shards)
        classes = shard_classes(config)
        model = build_model(config, info, train_loader.dataset.shards[0].num_classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        identity = data_identity(train_loader, val_loader, classes)
        position = (resume(config, info, model, optimizer, identity)
                    if config.snapshot and Path(config.snapshot).exists() else Position())
        if position.batch_in_epoch:
            train_loader.dataset.load_state_dict(read_data_state(config.snapshot, position))
        history = []
        steps = StepCounter(config, info, model, optimizer, identity, position)
        for epoch in range(position.epoch, config.num_epochs):
            if steps.done():
                break
            history.append(train_and_evaluate(model, train_loader, val_loader, optimizer, info,
                                              epoch, steps=steps))
            if steps.done() and steps.position.batch_in_epoch:
                break  # stopped mid-epoch (--max-steps): the snapshot says where
            steps.position = Position(epoch + 1, steps.position.step)
            if config.snapshot:
                save_snapshot(config.snapshot, model=model, optimizer=optimizer,
                              position=steps.position, settings=asdict(config),
                              identity=identity)
        if is_main_process() and config.out:
            Path(config.out).parent.mkdir(parents=True, exist_ok=True)
            Path(config.out).write_text(json.dumps({"world_size": info.world_size,
                                                    "config": asdict(config),
                                                    "epochs": history}, indent=2))
    finally:
        cleanup_distributed()
    return history


def data_state_path(snapshot: str | Path) -> Path:
    """Where the training shards' position is kept beside ``snapshot``.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    return Path(f"{snapshot}.data.json")


def read_data_state(snapshot: str | Path, position: Position) -> dict:
    """The ``ShardedImageDataset`` state saved with the snapshot at ``position.step``.

    Raises:
        ValueError: Naming the file, if it is missing or holds no state of that step.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    path = data_state_path(snapshot)
    try:
        states = json.loads(path.read_text(encoding="utf-8"))
        return states[str(position.step)]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: no shard position for step {position.step} of the snapshot "
                         f"{snapshot}, which stopped mid-epoch ({error})") from error


class StepCounter:
    """Counts optimizer steps; writes the mid-epoch snapshots and stops at ``--max-steps``.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    def __init__(self, config: ShardTrainConfig, info: DistInfo, model, optimizer,
                 identity: dict[str, str], position: Position) -> None:
        self.config, self.info, self.model, self.optimizer = config, info, model, optimizer
        self.identity, self.position = identity, position
        self.resumed_at = 0  # batch_in_epoch where this process's epoch began

    def done(self) -> bool:
        return 0 < self.config.max_steps <= self.position.step

    def batches(self, loader: DataLoader):
        """``loader``'s batches; after each step, a snapshot every ``--snapshot-every``."""
        for batch in loader:
            yield batch  # the caller trains on it before asking for the next one
            self.position = Position(self.position.epoch, self.position.step + 1,
                                     self.position.batch_in_epoch + 1)
            every = self.config.snapshot_every
            if self.config.snapshot and (self.done() or every and self.position.step % every == 0):
                self.save_mid_epoch(loader)
            if self.done():
                return

    def save_mid_epoch(self, loader: DataLoader) -> None:
        dataset = loader.dataset
        dataset = getattr(dataset, "dataset", dataset)  # a resumed epoch's planned batches
        state = dataset.state_dict(self.position.batch_in_epoch - self.resumed_at,
                                          num_workers=self.config.num_workers)
        if is_main_process():  # the position first: a snapshot never lacks its own
            path = data_state_path(self.config.snapshot)
            states = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
            states = {step: value for step, value in states.items()
                      if int(step) > self.position.step - 100 * max(self.config.snapshot_every, 1)}
            states[str(self.position.step)] = state
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(states), encoding="utf-8")
            partial.replace(path)
        save_snapshot(self.config.snapshot, model=self.model, optimizer=self.optimizer,
                      position=self.position, settings=asdict(self.config),
                      identity=self.identity)


def train_and_evaluate(model, train_loader: DataLoader, val_loader: DataLoader, optimizer,
                       info: DistInfo, epoch: int, *, steps: StepCounter | None = None) -> dict:
    """One epoch's record: every rank's counts, training metrics, and (rank 0) validation.

    With ``steps``, an epoch resumed mid-way continues where its state says, and the
    counter's mid-epoch snapshots and ``--max-steps`` apply.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    loader = train_loader
    if steps is not None:
        if steps.position.batch_in_epoch:  # resumed mid-epoch: the rest, in its planned batches
            train_loader = train_loader.dataset.planned_loader(
                num_workers=train_loader.num_workers, collate_fn=train_loader.collate_fn,
                pin_memory=train_loader.pin_memory)
        else:
            train_loader.dataset.set_epoch(epoch)
        steps.position = Position(epoch, steps.position.step, steps.position.batch_in_epoch)
        steps.resumed_at = steps.position.batch_in_epoch
        loader = _Batches(steps, train_loader)
    else:
        train_loader.dataset.set_epoch(epoch)
    record = {"epoch": epoch, **run_epoch(model, CountingLoader(loader), optimizer, info)}
    if is_main_process():
        record["val_loss"], record["val_acc"] = evaluate(unwrap(model), val_loader, info.device)
        print(f"epoch {epoch}: batches per rank {record['batches_per_rank']}, samples "
              f"per rank {record['samples_per_rank']}, train loss "
              f"{record['train_loss']:.3f}, val acc {record['val_acc']:.3f} "
              f"({record['seconds']:.1f} s)", flush=True)
    return record


class _Batches:
    # A loader whose iteration goes through StepCounter.batches (len() is not needed).
    def __init__(self, steps: StepCounter, loader: DataLoader) -> None:
        self.steps, self.loader = steps, loader

    def __iter__(self):
        return self.steps.batches(self.loader)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: a bad manifest, shard or label is one line naming it (exit status 1).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    config = parse_args(argv)
    try:
        # Before any process group or model: fail fast; read once, passed down.
        shards = (read_shards(config, "shards"), read_shards(config, "val_shards"))
        shard_classes(config)
        train(config, shards=shards)
    except (BadSampleError, FileNotFoundError, ValueError) as error:
        return fail(str(error), prog="common.shards.train")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
