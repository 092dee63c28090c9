"""ShardedImageDataset resumed mid-epoch through real DataLoaders (worker processes), counting
decodes: exact, in order, on another number of workers or ranks (the arithmetic:
tests/unit/test_shard_offsets.py)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader

from common.data import CustomImageDataset
from common.shards import ShardedImageDataset, write_shards
from tests.unit.test_shards import source, uneven  # noqa: F401


class KeyedShards(ShardedImageDataset):
    """Yields each sample's key in place of its image, and counts what it hands to the decoder
    (in shared memory, so worker processes count too)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.decodes = torch.zeros(1, dtype=torch.int64).share_memory_()

    def _decode(self, record):
        self.decodes += 1
        return f"{record.shard}/{record.key}"


@pytest.fixture(scope="module")
def even(tiny_data, tmp_path_factory):
    """24 samples in 8 shards of 3: every consumer's batches are full (order checks are exact)."""
    dataset = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))
    samples = [(dataset.path(i), int(dataset.labels[i])) for i in range(len(dataset))]
    return write_shards(samples, tmp_path_factory.mktemp("even"), shard_size=3)


def _run(shards, world_size, num_workers, batch_size, *, state=None, stop=None, **options):
    """Every rank's batches of keys (``stop``: only the first ones), and the datasets."""
    per_rank, datasets = [], []
    for rank in range(world_size):
        dataset = KeyedShards(shards, rank=rank, world_size=world_size, seed=3, buffer_size=4,
                              batch_size=batch_size, **options)
        if state is None:
            dataset.set_epoch(1)
        else:
            dataset.load_state_dict(state)
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
        batches = []
        for keys, _labels in loader:
            if len(batches) == stop:
                break
            batches.append(list(keys))
        per_rank.append(batches)
        datasets.append(dataset)
    return per_rank, datasets


def _global(per_rank) -> list[str]:
    """Step by step, rank by rank: the order of the whole job."""
    steps = max(len(batches) for batches in per_rank)
    return [key for t in range(steps) for batches in per_rank if t < len(batches)
            for key in batches[t]]


@pytest.mark.parametrize(("before", "after"), [
    ((1, 0, 6), (1, 0, 6)), ((1, 2, 6), (1, 2, 6)), ((1, 2, 6), (1, 0, 6)), ((1, 0, 6), (1, 2, 6)),
    ((2, 2, 3), (1, 0, 6)), ((1, 2, 6), (2, 2, 3)), ((2, 0, 3), (2, 2, 3))],
    ids=["0->0 workers", "2->2 workers", "2->0 workers", "0->2 workers", "2->1 ranks",
         "1->2 ranks", "2 ranks 0->2 workers"])
def test_resume_is_exact_in_order_and_decodes_only_the_rest(even, before, after):
    whole, datasets = _run(even, *before)
    model = [datasets[0].rank_sequence(r, epoch=1, world_size=before[0], num_workers=before[1],
                                       batch_size=before[2]) for r in range(before[0])]
    assert [[len(b) for b in batches] for batches in whole] == \
        [[len(b) for b in batches] for batches in model]  # the loader's order, as modelled
    part, stopped = _run(even, *before, stop=2)
    state = stopped[0].state_dict(2, num_workers=before[1])
    assert state["consumed"] == [2 * before[2]] * before[0]
    rest, resumed = _run(even, *after, state=state)
    assert _global(part) + _global(rest) == _global(whole)  # every sample once, in order
    assert sum(int(d.decodes) for d in resumed) == len(_global(rest)) == 24 - 12
    resumed[0].set_epoch(2)  # the next epoch is whole again
    assert len(_global(_run(even, *after[:2], after[2])[0])) == 24


@pytest.mark.parametrize("policy", ["pad", "drop"])
def test_uneven_shards_resume_on_another_plan_exactly_once(uneven, policy):
    whole, _ = _run(uneven, 2, 2, 3, equalize=policy)
    part, stopped = _run(uneven, 2, 2, 3, stop=1, equalize=policy)
    state = stopped[1].state_dict(1, num_workers=2)
    rest, resumed = _run(uneven, 1, 0, 6, state=state, equalize=policy)
    assert Counter(_global(part) + _global(rest)) == Counter(_global(whole))
    assert int(resumed[0].decodes) == len(_global(rest))
