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

import math
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image
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
_BILINEAR, _FLIP = Image.Resampling.BILINEAR, Image.Transpose.FLIP_LEFT_RIGHT


_MASK64 = (1 << 64) - 1


def _mix64(value: int) -> int:
    # splitmix64's step: add the golden gamma, then its finalizer (Steele, Lea, Flood 2014).
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of sample ``index`` in ``epoch`` of a run seeded ``seed``: a 64-bit integer.

    splitmix64 over the three numbers in turn: a fixed arithmetic function of them alone (no
    rank, worker, process or Python hash seed enters), about 1 µs against about 9 µs for
    ``np.random.SeedSequence([seed, epoch, index]).generate_state(1)``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return _mix64(_mix64(_mix64(seed & _MASK64) ^ (epoch & _MASK64)) ^ (index & _MASK64))


class SeededAugment(Dataset):
    """Sample ``i`` of epoch ``e`` is transformed under its own seed ``sample_seed(seed, e, i)``.

    The augmentation of a sample then depends on neither the rank that loads it, nor the
    DataLoader worker, nor the number of ranks, nor whether the run was resumed — which is
    what makes 1-process and N-process runs, and resumed runs, comparable exactly.

    ``generator``: the ``torch.Generator`` the transform draws from (``CropFlip(size,
    generator=g)``, the trainers' default); it is seeded per sample, about 1 µs. Without one the
    seed goes to torch's global CPU generator (``torch.default_generator``, which
    ``torchvision.transforms`` draw from), its state saved and restored around the sample
    (``fork_rng``, about 5 µs), so that the global RNG of the loading process is left as it
    was. Neither goes through ``torch.manual_seed``: that one also seeds every CUDA device's
    generator, about 100-350 µs per call on a CUDA build of torch.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, dataset: Dataset, *, seed: int,
                 generator: torch.Generator | None = None) -> None:
        self.dataset, self.seed, self.epoch, self.generator = dataset, seed, 0, generator

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        seed = sample_seed(self.seed, self.epoch, index)
        if self.generator is not None:
            self.generator.manual_seed(seed)
            return self.dataset[index]
        with torch.random.fork_rng(devices=[]):  # the CPU generator's state, restored after
            torch.default_generator.manual_seed(seed)
            return self.dataset[index]


#: Random numbers ``CropFlip`` draws per image: 10 tries of (area, aspect ratio), the crop's
#: top and left, the flip.
CROP_FLIP_DRAWS = 23


def crop_box(width: int, height: int, draws: Sequence[float], scale: Sequence[float],
             ratio: Sequence[float]) -> tuple[int, int, int, int]:
    """``(top, left, height, width)`` of a random resized crop of a ``width`` x ``height`` image.

    torchvision's ``RandomResizedCrop.get_params`` (pytorch/examples' recipe): up to 10 tries
    of an area in ``scale`` of the image's and a log-uniform aspect ratio in ``ratio``, the
    first box that fits placed uniformly; else the centre crop at the nearest ratio. The
    uniform numbers in [0, 1) come in ``draws`` (``CROP_FLIP_DRAWS - 1`` of them) instead of
    one torch call each, so the crop costs microseconds.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    area = width * height
    low, high = math.log(ratio[0]), math.log(ratio[1])
    for attempt in range(10):
        target = area * (scale[0] + (scale[1] - scale[0]) * draws[2 * attempt])
        aspect = math.exp(low + (high - low) * draws[2 * attempt + 1])
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return int(draws[20] * (height - h + 1)), int(draws[21] * (width - w + 1)), h, w
    shape = width / height  # the fallback: a centre crop
    if shape < min(ratio):
        w, h = width, round(width / min(ratio))
    elif shape > max(ratio):
        w, h = round(height * max(ratio)), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class CropFlip:
    """The trainers' augmentation: a random resized crop and a horizontal flip, to uint8.

    pytorch/examples' ImageNet recipe (``RandomResizedCrop`` + ``RandomHorizontalFlip``) done
    in one PIL ``resize`` of the crop box (no intermediate crop image), the flip on the small
    result, and the sample kept uint8: ``NormalizeCollate`` normalizes the whole batch last
    (Chapter 3). The crop and the flip come from one draw of ``CROP_FLIP_DRAWS`` numbers
    (``crop_box``) from ``generator``, by default torch's global CPU generator as in
    ``transforms``; under ``SeededAugment`` (given the same generator) every sample's crop and
    flip are fixed by ``(seed, epoch, index)``.
    Rotations and colour jitter (``V2TrainPreset``, Chapter 2.2) are left out: they double the
    CPU per sample (docs/scripts.md, "What each transform costs").

    Introduced in chapters/04_2_ddp_training.ipynb.
    """

    def __init__(self, size: int, *, scale: tuple[float, float] = (0.5, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3),
                 generator: torch.Generator | None = None) -> None:
        self.size, self.scale, self.ratio, self.generator = size, scale, ratio, generator

    def __call__(self, image) -> torch.Tensor:
        draws = torch.rand(CROP_FLIP_DRAWS, dtype=torch.float64, generator=self.generator).tolist()
        top, left, height, width = crop_box(*image.size, draws, self.scale, self.ratio)
        out = image.resize((self.size, self.size), _BILINEAR,
                           box=(left, top, left + width, top + height))
        if draws[-1] < 0.5:
            out = out.transpose(_FLIP)
        pixels = np.array(out)  # (H, W, C) uint8, writable: torchvision's pil_to_tensor, quicker
        return torch.from_numpy(pixels[:, :, None] if pixels.ndim == 2 else pixels).permute(2, 0, 1)

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

    # Augmented: crop and flip to uint8, the batch normalized last (NormalizeCollate), drawn
    # from a generator of the dataset's own that SeededAugment seeds per sample.
    generator = torch.Generator()
    train_tf = (CropFlip(size, generator=generator) if config.augment
                else V2EvalPreset(resize_size=size, crop_size=size, **norm))

    def split(name: str, transform, count: int) -> Dataset:
        dataset = data.dataset(name, transform)
        indices = data.subset(len(dataset), count)
        return dataset if len(indices) == len(dataset) else Subset(dataset, indices)

    return (SeededAugment(split("train", train_tf, config.subset), seed=config.seed,
                          generator=generator),
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
