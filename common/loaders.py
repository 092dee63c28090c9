"""DataLoader helpers that must live in a module so that worker processes can import them.

With the ``spawn`` and ``forkserver`` start methods (macOS, Windows, Python 3.14 on
Linux) a worker re-imports everything it is given by module and name; a function or
class defined in a notebook cell cannot be found there. Hence: collate functions,
samplers and ``worker_init_fn`` live here.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import WeightedRandomSampler


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn`` that (re)seeds NumPy and ``random`` in each DataLoader worker.

    Since PyTorch 1.9 each worker already seeds ``random``, torch and NumPy's global RNG
    itself (``torch/utils/data/_utils/worker.py``), from the loader's base seed plus the
    worker id; the base seed is drawn from the loader's ``generator``, which is what makes
    a run reproducible. This function repeats the NumPy and ``random`` seeding from
    ``torch.initial_seed()`` (the recipe of PyTorch's reproducibility notes), so the same
    code behaves alike on older PyTorch versions; it is harmless on current ones. A
    ``worker_init_fn`` is still the place for any other per-worker set-up (another
    library's RNG, opening a file handle per worker).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


class PadCollate:
    """``collate_fn`` for images of different sizes: pad each to the largest in the batch.

    Images are padded at the bottom and right with ``fill``; the original sizes come
    back too, so a model (or a loss) can ignore the padding.

    Args:
        fill: Value of the padded pixels.

    Returns (when called on a list of ``(image, label)``):
        ``(images, labels, sizes)``: (N, C, H_max, W_max), (N,) int64, (N, 2) int64 (H, W).

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """

    def __init__(self, *, fill: float = 0.0) -> None:
        self.fill = fill

    def __call__(self, batch: Sequence[tuple[torch.Tensor, int]]):
        if len(batch) == 0:
            raise ValueError("PadCollate got an empty batch")
        images, labels = zip(*batch, strict=True)
        channels = {image.shape[0] for image in images}
        if len(channels) != 1:
            raise ValueError(f"images in one batch have different channel counts: {channels}")
        height = max(image.shape[1] for image in images)
        width = max(image.shape[2] for image in images)
        padded = torch.stack([
            F.pad(image, (0, width - image.shape[2], 0, height - image.shape[1]), value=self.fill)
            for image in images
        ])
        sizes = torch.tensor([tuple(image.shape[1:]) for image in images], dtype=torch.int64)
        return padded, torch.as_tensor(labels, dtype=torch.int64), sizes

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fill={self.fill})"


def list_collate(batch: Sequence[tuple[object, int]]) -> tuple[list, torch.Tensor]:
    """``collate_fn`` that keeps the images as a list (any sizes, any types).

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """
    images, labels = zip(*batch, strict=True)
    return list(images), torch.as_tensor(labels, dtype=torch.int64)


def balanced_sampler(labels: Sequence[int] | np.ndarray, *, num_samples: int | None = None,
                     generator: torch.Generator | None = None) -> WeightedRandomSampler:
    """A ``WeightedRandomSampler`` that draws every class equally often on average.

    Each sample's weight is ``1 / count(its class)``, so each class gets the same total
    weight. Draws are with replacement: rare samples repeat, common ones are left out.

    Args:
        labels: The label of every sample of the dataset, in index order.
        num_samples: Draws per epoch; default ``len(labels)``.
        generator: Makes the draws reproducible.

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """
    labels = np.asarray(labels, dtype=np.int64)
    if labels.size == 0:
        raise ValueError("balanced_sampler needs at least one label")
    counts = np.bincount(labels)
    weights = 1.0 / counts[labels]
    return WeightedRandomSampler(torch.as_tensor(weights, dtype=torch.double),
                                 num_samples=num_samples or len(labels), replacement=True,
                                 generator=generator)
