"""The data side of ``common.ddp.train``: seeded augmentation, the two pipelines, the loaders.

``--data-pipeline decode`` (default) is Chapter 2's: every JPEG decoded and transformed per
sample, in every epoch. ``--data-pipeline cache`` is Chapter 3's: each image decoded, resized
and cropped once into a uint8 memmap cache (``common.fast.cache``), samples kept uint8 until
the batch exists, the whole batch normalized last (``common.fast.BatchNormalize``). The cache
holds eval crops, so it needs ``--no-augment``; it differs from the decode pipeline only by
the rounding of each pixel to a uint8 level (checked in chapters/04_1_ddp_fundamentals.ipynb).
Both read any layout of ``common.images.layouts``: the shapes, an ImageFolder root, an annotations CSV.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset, default_collate

from common.ddp.config import RunSettings
from common.ddp.normalization import run_statistics
from common.ddp.process_group import DistInfo
from common.ddp.samplers import ResumableDistributedSampler, ShardSampler
from common.fast.cache import CacheConfig, CachedImageDataset, ensure_cache
from common.fast.pipeline import BatchNormalize
from common.imagenet import IMAGENET_MEAN, IMAGENET_STD
from common.images.layouts import ImageData, as_image_data
from common.loaders import seed_worker
from common.synthetic import ShapesData

PIPELINES = ("decode", "cache")


class SeededAugment(Dataset):
    """Sample ``i`` of epoch ``e`` is transformed under its own seed ``(seed, e, i)``.

    The augmentation of a sample then depends on neither the rank that loads it, nor the
    DataLoader worker, nor the number of ranks, nor whether the run was resumed — which is
    what makes 1-process and N-process runs, and resumed runs, comparable exactly.
    The global torch RNG of the loading process is left as it was.

    The seed goes to the CPU generator only (``torch.default_generator``, a ``torch.Generator``,
    which the transforms draw from), not through ``torch.manual_seed``: that one also seeds every
    CUDA device's generator, about 100-350 µs per call on a CUDA build of torch, against about
    10 µs here for the seed and the save/restore together. The draws, hence the images, are the same.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, dataset: Dataset, *, seed: int) -> None:
        self.dataset, self.seed, self.epoch = dataset, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        sample_seed = np.random.SeedSequence([self.seed, self.epoch, index]).generate_state(1)[0]
        with torch.random.fork_rng(devices=[]):  # the CPU generator's state, restored after
            torch.default_generator.manual_seed(int(sample_seed))
            return self.dataset[index]


class CropFlip:
    """The trainers' augmentation: a random resized crop and a horizontal flip, to uint8.

    pytorch/examples' ImageNet recipe (``RandomResizedCrop`` + ``RandomHorizontalFlip``) done
    in one PIL ``resize`` of the crop box (no intermediate crop image), the flip on the small
    result, and the sample kept uint8: ``NormalizeCollate`` normalizes the whole batch last
    (Chapter 3). The draws come from torch's CPU generator, as in ``transforms``: under
    ``SeededAugment`` every sample's crop and flip are fixed by ``(seed, epoch, index)``.
    Rotations and colour jitter (``V2TrainPreset``, Chapter 2.2) are left out: they double the
    CPU per sample (docs/scripts.md, "What each transform costs").

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, size: int, *, scale: tuple[float, float] = (0.5, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> None:
        self.size, self.scale, self.ratio = size, scale, ratio

    def __call__(self, image) -> torch.Tensor:
        from PIL import Image
        from torchvision.transforms import RandomResizedCrop
        from torchvision.transforms.functional import pil_to_tensor

        top, left, height, width = RandomResizedCrop.get_params(image, list(self.scale),
                                                                list(self.ratio))
        out = image.resize((self.size, self.size), Image.Resampling.BILINEAR,
                           box=(left, top, left + width, top + height))
        if torch.rand(1) < 0.5:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return pil_to_tensor(out)

    def __repr__(self) -> str:
        return f"CropFlip(size={self.size}, scale={self.scale})"


class CachedSamples(Dataset):
    """``(uint8 (3, H, W), label)`` per index from a uint8 cache, batched by the default collate.

    Only ``__getitem__``: the DataLoader fetches sample by sample (a memmap row costs
    microseconds) and the default collate stacks them, so any sampler, ``Subset`` or
    ``ConcatDataset`` works. ``set_epoch`` is a no-op (nothing random happens per sample);
    it is there so the training loop treats both pipelines alike.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, cache: CachedImageDataset) -> None:
        self.cache = cache

    def set_epoch(self, epoch: int) -> None:
        pass

    def __len__(self) -> int:
        return len(self.cache)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.cache[index]


class NormalizeCollate:
    """``collate_fn``: the default collate, then the whole uint8 batch normalized at once.

    A class, not a closure, so DataLoader workers under ``spawn`` can unpickle it.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, *, mean: Sequence[float] = IMAGENET_MEAN,
                 std: Sequence[float] = IMAGENET_STD) -> None:
        self.normalize = BatchNormalize(mean=mean, std=std)  # --normalize (common.ddp.normalization)

    def __call__(self, samples):
        images, labels = default_collate(samples)
        return self.normalize(images), labels


def cached_split(data: ImageData | ShapesData, split: str, size: int,
                 count: int) -> CachedSamples:
    """``count`` images of ``split`` (0: all; ``data.subset``) from a uint8 cache under
    ``data.cache_root``.

    Built on first use (every rank may call this at once: a file lock lets one build), opened
    with ``stat`` checks afterwards. Chapter 4.1's cache of the same images is the same folder
    (``data/cache`` beside ``data/shapes``); another layout has a folder of its own
    (``common.images.layouts``), and the manifest records the layout and every file with its label.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    data = as_image_data(data)
    source = data.dataset(split)
    indices = data.subset(len(source), count)
    name = (f"{split}_{size}" if len(indices) == len(source)
            else f"{split}_{size}_{data.subset_name}{len(indices)}")
    cache = ensure_cache(source, data.cache_root / name,
                         CacheConfig(resize_size=size, crop_size=size), indices=indices,
                         verbose=False)
    return CachedSamples(CachedImageDataset(cache.root, check=False))


def build_datasets(config: RunSettings, data: ImageData) -> tuple[Dataset, Dataset, object, object]:
    """The training and validation sets of ``--data-pipeline`` and their collates:
    ``(train_set, val_set, collate, val_collate)`` (a collate is None where the default does).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    size = config.image_size
    stats = run_statistics(config, data)  # --normalize: ImageNet's or the training split's own
    norm = {"mean": stats["mean"], "std": stats["std"]}
    pipeline = config.data_pipeline
    if pipeline == "cache":
        if config.augment:
            raise ValueError("--data-pipeline cache stores eval crops: add --no-augment")
        return (cached_split(data, "train", size, config.subset),
                cached_split(data, "val", size, config.subset // 2), NormalizeCollate(**norm),
                NormalizeCollate(**norm))
    if pipeline != "decode":
        raise ValueError(f"--data-pipeline must be one of {PIPELINES}, got {pipeline!r}")
    from common.transforms import V2EvalPreset  # torchvision: the decode path only

    # Augmented: crop and flip to uint8, the batch normalized last (NormalizeCollate).
    train_tf = CropFlip(size) if config.augment else V2EvalPreset(resize_size=size, crop_size=size, **norm)

    def split(name: str, transform, count: int) -> Dataset:
        dataset = data.dataset(name, transform)
        indices = data.subset(len(dataset), count)
        return dataset if len(indices) == len(dataset) else Subset(dataset, indices)

    return (SeededAugment(split("train", train_tf, config.subset), seed=config.seed),
            split("val", V2EvalPreset(resize_size=size, crop_size=size, **norm), config.subset // 2),
            NormalizeCollate(**norm) if config.augment else None, None)


def build_loaders(config: RunSettings, info: DistInfo, data: ImageData | ShapesData):
    """Training loader (resumable ``DistributedSampler``), exact-once validation loader.

    ``config`` is a ``TrainConfig`` or an ``FSDPTrainConfig`` (both ``RunSettings``):
    ``--data-pipeline`` picks
    Chapter 2's per-sample decoding or Chapter 3's uint8 cache. ``data`` is any layout of
    ``common.images.layouts`` (``resolve_data(config)``), or the shapes of ``common.ensure_data``.

    Returns:
        ``(train_loader, val_loader)``; ``train_loader.sampler`` and ``.dataset`` both
        have ``set_epoch``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    per_rank, rest = divmod(config.batch_size, info.world_size * config.grad_accum)
    if rest or per_rank == 0:
        raise ValueError(f"--batch-size {config.batch_size} must be a multiple of world_size "
                         f"({info.world_size}) x --grad-accum ({config.grad_accum})")
    train_set, val_set, collate, val_collate = build_datasets(config, as_image_data(data))
    # drop_last: every optimizer step sees exactly batch_size samples, on any number of ranks.
    sampler = ResumableDistributedSampler(train_set, num_replicas=info.world_size, rank=info.rank,
                                          shuffle=True, seed=config.seed, drop_last=True)
    common = {"num_workers": config.num_workers, "pin_memory": info.device.type == "cuda",
              "worker_init_fn": seed_worker}
    train_loader = DataLoader(train_set, batch_size=per_rank, sampler=sampler, drop_last=True,
                              collate_fn=collate, **common)
    val_loader = DataLoader(val_set, batch_size=per_rank * config.grad_accum, **common,
                            collate_fn=val_collate,
                            sampler=ShardSampler(len(val_set), rank=info.rank,
                                                 world_size=info.world_size))
    if len(train_loader) < config.grad_accum:
        raise ValueError(f"{len(train_set)} training images are too few for --batch-size "
                         f"{config.batch_size}: not one optimizer step per epoch")
    return train_loader, val_loader
