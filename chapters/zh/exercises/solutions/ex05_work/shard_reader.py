"""每个 rank 用 DataLoader 的工作进程读取 8 个分片（每片 6 个样本），报告读到了什么。

    torchrun --standalone --nproc_per_node=N shard_reader.py --workers W
"""

import argparse
import random

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

SHARDS = [list(range(6 * s, 6 * s + 6)) for s in range(8)]  # 分片 s 保存样本 6s .. 6s+5


class ShardStream(IterableDataset):
    """本 rank 各分片中的样本，一个分片接一个分片。"""

    def __init__(self, shards: list[list[int]], *, seed: int = 0) -> None:
        self.shards, self.seed = shards, seed

    def __iter__(self):
        order = list(range(len(self.shards)))
        random.shuffle(order)  # 每次运行都是新的分片顺序
        rank, world = dist.get_rank(), dist.get_world_size()
        for shard in order[rank::world]:
            yield from self.shards[shard]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        loader = DataLoader(ShardStream(SHARDS), batch_size=None, num_workers=args.workers)
        mine = [int(sample) for sample in loader]
        print(f"rank {rank}: read {len(mine)} samples, {len(set(mine))} distinct")
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            read = [sample for samples in everyone for sample in samples]
            missing = 48 - len(set(read))
            print(f"all ranks: {len(read)} samples, {len(set(read))} distinct, {missing} never read")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
