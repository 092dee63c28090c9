"""ShardedImageDataset's resume by offset: the arithmetic, in-process (no DataLoader workers).

The DataLoader runs with workers and with several ranks in tests/system/test_shard_resume_processes.py.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from common.data import CustomImageDataset
from common.shards import ShardedImageDataset, read_shard, write_shards
from common.shards import order as shard_order
from common.shards.format import ShardRecord
from common.shards.order import resume_batches, round_robin, shuffled_positions


@pytest.fixture(scope="module")
def uneven(tiny_data, tmp_path_factory):
    """24 samples in shards of 5, 5, 5, 5, 4."""
    source = CustomImageDataset(tiny_data.labels_csv("train"), tiny_data.images_dir("train"))
    samples = [(source.path(i), int(source.labels[i])) for i in range(len(source))]
    return write_shards(samples, tmp_path_factory.mktemp("uneven"), shard_size=5)


@pytest.mark.parametrize(("count", "size"), [(0, 4), (3, 4), (4, 4), (17, 4), (30, 1), (25, 7)])
def test_shuffled_positions_replays_the_shuffle_buffer(count, size):
    records = [ShardRecord("s", str(i), f"{i}.jpg", b"x", 0) for i in range(count)]
    buffered = shard_order.shuffle_buffered(iter(records), size, np.random.default_rng([1, 2]), 2**20)
    expected = [int(r.key) for r in buffered] if size > 1 else list(range(count))
    assert shuffled_positions(count, size, np.random.default_rng([1, 2])) == expected
    assert sorted(expected) == list(range(count))


def test_round_robin_takes_one_batch_per_worker_in_turn():
    streams = [list("abcdefg"), list("12345"), []]
    assert round_robin(streams, 3) == [list("abc"), list("123"), list("def"), list("45"),
                                       list("g")]
    assert round_robin([list(range(5))], 2) == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize(("old", "consumed", "world_size", "batch_size"),
                         [(1, [4], 1, 3), (2, [3, 3], 1, 6), (1, [6], 2, 3), (2, [2, 5], 3, 2),
                          (3, [0, 0, 0], 2, 4)])
def test_resume_batches_deals_out_every_rest_exactly_once(old, consumed, world_size, batch_size):
    sequences = [[(r, i) for i in range(10 + r)] for r in range(old)]
    plan = resume_batches(sequences, consumed, world_size=world_size, batch_size=batch_size)
    got = [sample for batches in plan for batch in batches for sample in batch]
    rest = [s for seq, n in zip(sequences, consumed, strict=True) for s in seq[n:]]
    assert Counter(got) == Counter(rest)
    steps = [batch for step in itertools.zip_longest(*plan, fillvalue=[]) for batch in step]
    for r in range(old):  # step by step, rank by rank: each old rank's rest in its order
        assert [s for batch in steps for s in batch if s[0] == r] == sequences[r][consumed[r]:]
    assert all(len(batch) <= batch_size for batches in plan for batch in batches)


def test_the_same_global_batch_keeps_the_global_order():
    sequences = [list(range(0, 12)), list(range(100, 112))]  # 2 ranks of 3 per batch
    whole = [s for t in range(4) for seq in sequences for s in seq[3 * t:3 * t + 3]]
    one = resume_batches(sequences, [3, 3], world_size=1, batch_size=6)[0]
    assert [s for batch in one for s in batch] == whole[6:]
    back = resume_batches([whole], [6], world_size=2, batch_size=3)
    assert back[0][0] == whole[6:9] and back[1][0] == whole[9:12]


@pytest.mark.parametrize("policy", ["pad", "drop", "none"])
@pytest.mark.parametrize(("world_size", "num_workers"), [(1, 0), (1, 2), (2, 2), (2, 0), (3, 1)])
def test_stream_positions_are_the_records_order(uneven, policy, world_size, num_workers):
    for rank in range(world_size):
        dataset = ShardedImageDataset(uneven, rank=rank, world_size=world_size, equalize=policy,
                                      seed=4, buffer_size=3)
        dataset.set_epoch(2)
        for worker in range(max(num_workers, 1)):
            keys = [(r.shard, r.key) for r in dataset.records(worker=worker,
                                                                num_workers=num_workers)]
            positions = dataset.stream_positions(rank, worker, epoch=2, world_size=world_size,
                                                 num_workers=num_workers)
            assert [(dataset.shards[i].path.name, dataset.read_sample(i, m).key)
                    for i, m in positions] == keys


def test_read_sample_is_the_streamed_record(uneven):
    dataset = ShardedImageDataset(uneven, verify=False)
    for shard, info in enumerate(dataset.shards):
        for position, record in enumerate(read_shard(info.path)):
            assert dataset.read_sample(shard, position) == record


def test_state_counts_the_consumed_prefix_of_each_rank(uneven):
    dataset = ShardedImageDataset(uneven, rank=1, world_size=2, seed=4, batch_size=2)
    dataset.set_epoch(3)
    state = dataset.state_dict(2, num_workers=2)
    assert state == {"epoch": 3, "world_size": 2, "num_workers": 2, "batch_size": 2,
                     "consumed": [4, 4]}
    resumed = ShardedImageDataset(uneven, rank=0, world_size=1, seed=4, batch_size=4)
    resumed.load_state_dict(state)
    assert resumed.epoch == 3
    # one more step of 4 on one rank takes 2 from each of the two old ranks
    assert resumed.state_dict(1, num_workers=0)["consumed"] == [6, 6]
    resumed.set_epoch(4)  # the next epoch starts afresh
    assert resumed.state_dict(0, num_workers=0)["world_size"] == 1


def test_resuming_needs_the_batch_size_and_a_real_state(uneven):
    state = ShardedImageDataset(uneven, batch_size=2).state_dict(1, num_workers=0)
    with pytest.raises(ValueError, match="batch_size"):
        ShardedImageDataset(uneven).load_state_dict(state)
    with pytest.raises(ValueError, match="not a ShardedImageDataset state"):
        ShardedImageDataset(uneven, batch_size=2).load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="one count per rank"):
        ShardedImageDataset(uneven, batch_size=2).load_state_dict({**state, "consumed": [1, 2]})
