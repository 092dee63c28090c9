"""DataLoader helpers that must live in a module so that worker processes can import them."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn`` that seeds NumPy and ``random`` in each DataLoader worker.

    PyTorch seeds each worker's torch RNG from the loader's generator, but not NumPy's
    or Python's; without this, workers of some start methods share NumPy random streams.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)
