"""The words of every diagram, one table per language, and each diagram's caption.

The Chinese uses the glossary's terms (GLOSSARY.md: 工作进程, 整理函数, 全归约, 梯度分桶, rank, 分片 ...).
A label with ``{}`` is filled in by the drawing code (a rank's number, a measured size).
"""

from __future__ import annotations

LANGUAGES = ("en", "zh")

LABELS: dict[str, dict[str, dict[str, str]]] = {
    "en": {
        "pipeline_stages": {
            "read": "read", "decode": "decode", "transform": "transform", "collate": "collate",
            "device": "to device",
            "read_what": "file → bytes", "decode_what": "bytes → image",
            "transform_what": "crop, flip, normalize", "collate_what": "32 samples → batch",
            "device_what": "CPU → GPU",
            "getitem": "Dataset.__getitem__(i)", "collate_fn": "collate_fn",
            "to_device": "batch.to(device)",
            "worker": "a DataLoader worker process (num_workers > 0)",
            "main": "the main process"},
        "transform_pipeline": {
            "input": "PIL image", "output": "tensor", "train": "training: {}",
            "eval": "evaluation: {}",
            "types": "under a step: its output, where the dtype or shape changes",
            "getitem": "all of it runs in Dataset.__getitem__(i): in a DataLoader worker when "
                       "num_workers > 0",
            "random": "random: a new draw on every call",
            "fixed": "deterministic: the same output on every call"},
        "collate_path": {
            "csv": "annotations CSV", "dataset": "CustomImageDataset", "samples": "samples",
            "batch": "PadCollate() → one batch", "weight": "w = {}",
            "sampler": "balanced_sampler: w = 1 / count(label)", "getitem": "__getitem__(i)",
            "row": "row i → path, label", "load": "load_rgb(path)",
            "transform": "transform(image)", "returns": "return image, label",
            "shapes": "images {}\nlabels {} · sizes {}", "item": "label {} · size ({}, {})",
            "note": "hatched: padding; sizes say where each image ends"},
        "loader_prefetch": {
            "worker": "worker {}", "main": "main process", "batch": "batch {}",
            "wait": "wait", "idle": "idle", "step_n": "step {}", "time": "time →",
            "load": "a worker loads a batch", "step": "a training step on it",
            "wait_long": "waiting (loop: for data; worker: 4 batches already in flight)",
            "rule": "num_workers=2, prefetch_factor=2: at most 2 × 2 = 4 batches in flight"},
        "sampler_split": {
            "epoch": "set_epoch({}): shuffle (seed + epoch), pad, deal out in turn",
            "padding": "padding", "rank": "rank {}",
            "note": "10 indices, 4 ranks: padded to 12 so every rank gets 3; "
                    "without set_epoch every epoch repeats the first order"},
        "shard_assignment": {
            "order": "the epoch's shard order", "shard": "shard {}",
            "rank": "rank {} of {}", "worker": "worker {}\nshards {}",
            "rule": "consumer (rank, worker) reads order[rank::world_size][worker::num_workers]"},
        "ring_allreduce": {
            "rank": "rank {}", "ring": "each step: every rank sends\none chunk to the next",
            "start": "start: 4 chunks each", "after_rs": "after reduce-scatter",
            "after_ag": "after all-gather", "steps": "N−1\nsteps",
            "cost": "Σc = chunk c summed over all ranks\neach rank sends 2(N−1)/N of its "
                    "data in all, whatever N"},
        "ddp_buckets": {
            "single": "one all-reduce after backward", "bucketed": "buckets (bucket_cap_mb)",
            "compute": "backward", "comm": "all-reduce", "grad": "grad L{}",
            "all": "all-reduce every gradient", "bucket": "bucket {} (L{}, L{})",
            "fills": "bucket {} fills", "step": "step", "saved": "the step starts this much earlier",
            "time": "time →"},
        "zero_stages": {
            "stage0": "DDP", "stage1": "ZeRO-1", "stage2": "ZeRO-2", "stage3": "ZeRO-3 = FSDP",
            "rank": "rank {}", "params": "parameters", "grads": "gradients",
            "optim": "optimizer state (Adam: 2 per parameter)",
            "bytes": "{:g} bytes / parameter"},
        "fsdp_unit": {
            "forward": "forward of one block", "backward": "backward of the same block",
            "shard": "own shard", "gather": "all-gather", "full": "full parameters",
            "fwd": "forward", "free": "freed again", "bwd": "backward",
            "grads_full": "full gradients", "scatter": "reduce-scatter",
            "grads_shard": "gradient shard", "opt": "step", "updated": "updated shard",
            "rank": "r{}", "ranks": "each row is one rank; filled = held in memory"},
        "dcp_reshard": {
            "saved": "saved by {} ranks", "loaded": "loaded on {} ranks",
            "file": "__{}_0.distcp", "row": "row {}", "rank": "rank {}",
            "metadata": ".metadata: which rows are in which file",
            "note": "each new rank reads only the rows it needs, from whichever file holds them"},
        "loader_resume": {
            "step": "step", "full": "uninterrupted run",
            "resumed": "StatefulDataLoader,\nload_state_dict(state)",
            "restarted": "plain DataLoader,\nstarted again", "batch": "b{}",
            "same": "= uninterrupted", "stop": "stop after step {}: checkpoint",
            "twice": "seen twice", "state": "loader.state_dict() after step {}",
            "yielded": "_num_yielded = {}: batches already yielded",
            "samples": "samples_yielded = {}: the sampler's position",
            "generator": "generator: {} bytes of RNG state (this epoch's order)",
            "workers": "with num_workers > 0, also one snapshot per worker",
            "not_saved": "not in it: prefetched batches (fetched again on resume)",
            "continues": "resumed: step {} gets b{},\nsamples {}",
            "restart_note": "started again: b1–b{} once more,\nthe epoch ends at step {}"},
        "elastic_rendezvous": {
            "agent": "agent {}", "round": "rendezvous round {}", "train": "start at world size {}",
            "resume": "resume at world size {}", "rank": "rank {}",
            "waits": "arrives, waits", "dies": "leaves",
            "join": "a join: restart,\nno restart attempt used",
            "leave": "a leave: restart,\nuses one of --max-restarts", "time": "time →"},
        "your_data_path": {
            "yours": "your images", "imagefolder": "ImageFolder\ntrain/cat/, val/cat/ …",
            "csv": "the guide's CSV\nfile_name,label + images",
            "decode": "decode every epoch", "cache": "uint8 cache", "shards": "shards (.tar)",
            "ddp": "DDP: a full replica\non every rank", "fsdp": "FSDP: a shard\non every rank",
            "checkpoint": "checkpoint:\nweights + class list",
            "resume": "resume: same classes, or refused", "layout": "--data DIR (or --train-csv ...)",
            "pipeline": "--data-pipeline / make_shards --imagefolder", "trainer": "torchrun -m ...",
            "saved": "--checkpoint / --snapshot"},
    },
    "zh": {
        "pipeline_stages": {
            "read": "读取", "decode": "解码", "transform": "变换", "collate": "整理",
            "device": "送到设备",
            "read_what": "文件 → 字节", "decode_what": "字节 → 图片",
            "transform_what": "裁剪、翻转、归一化", "collate_what": "32 个样本 → 批次",
            "device_what": "CPU → GPU",
            "getitem": "Dataset.__getitem__(i)", "collate_fn": "整理函数 collate_fn",
            "to_device": "batch.to(device)",
            "worker": "数据加载器的工作进程（num_workers > 0）",
            "main": "主进程"},
        "transform_pipeline": {
            "input": "PIL 图片", "output": "张量", "train": "训练：{}", "eval": "评估：{}",
            "types": "步骤下方：它的输出（只在 dtype 或形状改变时标出）",
            "getitem": "这些都在 Dataset.__getitem__(i) 中运行：num_workers > 0 时在数据加载器的工作进程里",
            "random": "随机：每次调用都重新抽取",
            "fixed": "确定性：每次调用输出都相同"},
        "collate_path": {
            "csv": "标注文件（CSV）", "dataset": "CustomImageDataset", "samples": "样本",
            "batch": "PadCollate() → 一个批次", "weight": "w = {}",
            "sampler": "balanced_sampler：w = 1 / 同类样本数", "getitem": "__getitem__(i)",
            "row": "第 i 行 → path, label", "load": "load_rgb(path)",
            "transform": "transform(image)", "returns": "return image, label",
            "shapes": "images {}\nlabels {} · sizes {}", "item": "标签 {} · 尺寸 ({}, {})",
            "note": "斜线：填充；sizes 记录每张图片在哪里结束"},
        "loader_prefetch": {
            "worker": "工作进程 {}", "main": "主进程", "batch": "批次 {}",
            "wait": "等待", "idle": "空闲", "step_n": "第 {} 步", "time": "时间 →",
            "load": "工作进程加载一个批次", "step": "用它做一个训练步",
            "wait_long": "等待（训练循环：等数据；工作进程：已有 4 个批次在预取）",
            "rule": "num_workers=2, prefetch_factor=2：最多 2 × 2 = 4 个批次同时在预取"},
        "sampler_split": {
            "epoch": "set_epoch({})：打乱（seed + epoch）、补齐、依次分给各个 rank",
            "padding": "补齐", "rank": "rank {}",
            "note": "10 个索引、4 个 rank：补齐到 12 个，每个 rank 各得 3 个；"
                    "不调用 set_epoch，每个轮次都重复第一个轮次的顺序"},
        "shard_assignment": {
            "order": "本轮次的分片顺序", "shard": "分片 {}",
            "rank": "rank {}（共 {} 个）", "worker": "工作进程 {}\n分片 {}",
            "rule": "消费者 (rank, worker) 读取 order[rank::world_size][worker::num_workers]"},
        "ring_allreduce": {
            "rank": "rank {}", "ring": "每一步：每个 rank 把一块\n发给下一个 rank",
            "start": "开始：每个 rank 4 块", "after_rs": "归约散射之后",
            "after_ag": "全收集之后", "steps": "N−1\n步",
            "cost": "Σc = 所有 rank 第 c 块之和\n无论 N 多大，每个 rank 总共发送自身数据的 2(N−1)/N"},
        "ddp_buckets": {
            "single": "反向传播结束后做一次全归约", "bucketed": "梯度分桶（bucket_cap_mb）",
            "compute": "反向传播", "comm": "全归约", "grad": "L{} 梯度",
            "all": "对全部梯度做全归约", "bucket": "桶 {}（L{}、L{}）",
            "fills": "桶 {} 填满", "step": "更新", "saved": "优化器更新提前了这么多",
            "time": "时间 →"},
        "zero_stages": {
            "stage0": "DDP", "stage1": "ZeRO-1", "stage2": "ZeRO-2", "stage3": "ZeRO-3 = FSDP",
            "rank": "rank {}", "params": "参数", "grads": "梯度",
            "optim": "优化器状态（Adam：每个参数 2 个）",
            "bytes": "每个参数 {:g} 字节"},
        "fsdp_unit": {
            "forward": "一个块的前向传播", "backward": "同一个块的反向传播",
            "shard": "自己的分片", "gather": "全收集", "full": "完整参数",
            "fwd": "前向", "free": "再次释放", "bwd": "反向",
            "grads_full": "完整梯度", "scatter": "归约散射",
            "grads_shard": "梯度分片", "opt": "更新", "updated": "更新后的分片",
            "rank": "rank {}", "ranks": "每一行是一个 rank；填色 = 在内存中持有"},
        "dcp_reshard": {
            "saved": "由 {} 个 rank 保存", "loaded": "加载到 {} 个 rank",
            "file": "__{}_0.distcp", "row": "第 {} 行", "rank": "rank {}",
            "metadata": ".metadata：哪些行在哪个文件里",
            "note": "每个新 rank 只读取自己需要的行，无论它们在哪个文件里"},
        "loader_resume": {
            "step": "步", "full": "不中断地运行",
            "resumed": "StatefulDataLoader，\nload_state_dict(state)",
            "restarted": "普通 DataLoader，\n重新开始", "batch": "b{}",
            "same": "= 不中断时的批次", "stop": "第 {} 步后停止：保存检查点",
            "twice": "看到两次", "state": "第 {} 步后的 loader.state_dict()",
            "yielded": "_num_yielded = {}：已经产出的批次数",
            "samples": "samples_yielded = {}：采样器的位置",
            "generator": "generator：{} 字节的随机数状态（本轮次的顺序）",
            "workers": "num_workers > 0 时，每个工作进程还各有一份快照",
            "not_saved": "不包括：已预取的批次（恢复时重新获取）",
            "continues": "恢复后：第 {} 步得到 b{}，\n样本 {}",
            "restart_note": "重新开始：b1–b{} 再来一遍，\n轮次到第 {} 步才结束"},
        "elastic_rendezvous": {
            "agent": "代理进程 {}", "round": "第 {} 轮 rendezvous", "train": "以 world size {} 启动",
            "resume": "以 world size {} 恢复", "rank": "rank {}",
            "waits": "到达，等待", "dies": "离开",
            "join": "加入：重启，\n不占用重启次数",
            "leave": "离开：重启，\n用掉一次 --max-restarts", "time": "时间 →"},
        "your_data_path": {
            "yours": "你的图片", "imagefolder": "ImageFolder\ntrain/猫/、val/猫/ …",
            "csv": "指南的 CSV\nfile_name,label + 图片",
            "decode": "每个轮次都解码", "cache": "uint8 缓存", "shards": "分片（.tar）",
            "ddp": "DDP：每个 rank\n一份完整副本", "fsdp": "FSDP：每个 rank\n一个分片",
            "checkpoint": "检查点：\n权重 + 类别列表",
            "resume": "恢复：类别相同，否则拒绝", "layout": "--data DIR（或 --train-csv ...）",
            "pipeline": "--data-pipeline / make_shards --imagefolder", "trainer": "torchrun -m ...",
            "saved": "--checkpoint / --snapshot"},
    },
}

#: What to look at, one sentence per diagram: the notebook's markdown shows it under the picture.
CAPTIONS: dict[str, dict[str, str]] = {
    "en": {
        "pipeline_stages": "A sample's way to the model: everything left of the device copy runs "
                           "in a DataLoader worker, so a slow decode or transform never blocks "
                           "the training loop while the workers keep up.",
        "transform_pipeline": "Only the training preset's middle steps are random (a new crop, flip, "
                              "rotation and colour on every call, so each epoch sees new images); "
                              "both presets start with `ToImage` and end with `ToDtype` and "
                              "`Normalize`, and all of it runs in `__getitem__`, in the worker.",
        "collate_path": "Each CSV row becomes one sample of its own size in `__getitem__`; "
                        "`PadCollate` pads them to the batch's largest height and width (hatched) "
                        "and returns the sizes with them, and `balanced_sampler` would draw the "
                        "rows by their weights w instead of in order.",
        "loader_prefetch": "The loop waits only for the first batch; after that the two workers "
                           "stay up to four batches ahead, and pause when the queue is full.",
        "sampler_split": "Every rank gets the same number of indices (the hatched ones are "
                         "repeats that pad the split), and set_epoch gives each epoch a new "
                         "order that all ranks agree on.",
        "shard_assignment": "Each shard goes to exactly one (rank, worker): the shards are dealt "
                            "out by rank first, then by worker, so no sample is read twice.",
        "ring_allreduce": "Reduce-scatter leaves each rank one fully summed chunk (Σ), all-gather "
                          "passes those around; each rank only ever talks to its neighbour.",
        "ddp_buckets": "With buckets the all-reduce of the last layers' gradients runs while "
                       "backward still computes the first layers', so the step starts earlier.",
        "zero_stages": "Each ZeRO stage shards one more kind of state over the 4 ranks (filled = "
                       "held): the bytes each rank holds per parameter fall from 16 to 4.",
        "fsdp_unit": "A block's full parameters exist only around its own forward and backward; "
                     "outside them each rank holds just its shard, and its gradient shard.",
        "dcp_reshard": "The checkpoint's two files are cut along rows, not ranks: three ranks "
                       "load it by reading the rows they need, the middle rank from both files.",
        "loader_resume": "The state saved at step 3 is a position, not data: the resumed "
                         "`StatefulDataLoader` (even with another seed) yields exactly the batches "
                         "of the uninterrupted run from step 4 on, while a plain `DataLoader` "
                         "starts the epoch over and repeats the first three.",
        "elastic_rendezvous": "Every change of membership is a new rendezvous round and a "
                              "restart at the new world size from the newest checkpoint; only "
                              "a leave uses up a --max-restarts attempt.",
        "your_data_path": "Your images take the course's way: either layout, then one of three "
                          "pipelines (decode, the uint8 cache, shards), then DDP or FSDP on any "
                          "number of ranks; the checkpoint keeps the class list, so a resume on "
                          "other classes is refused instead of training on wrong labels.",
    },
    "zh": {
        "pipeline_stages": "样本通往模型的路径：复制到设备之前的所有步骤都在数据加载器的工作进程中运行，"
                           "所以只要工作进程跟得上，慢的解码或变换就不会阻塞训练循环。",
        "transform_pipeline": "只有训练预设中间的几步是随机的（每次调用都重新裁剪、翻转、旋转和调整颜色，"
                              "所以每个轮次看到的都是新图片）；两个预设都以 `ToImage` 开始、以 `ToDtype` 和 "
                              "`Normalize` 结束，而且全部在工作进程里的 `__getitem__` 中运行。",
        "collate_path": "每个 CSV 行在 `__getitem__` 中变成一个尺寸各不相同的样本；`PadCollate` 把它们"
                        "填充到批次中最大的高和宽（斜线部分），并同时返回原来的尺寸；换用 "
                        "`balanced_sampler` 时，它按权重 w 抽取各行，而不是按顺序。",
        "loader_prefetch": "训练循环只为第一个批次等待；之后两个工作进程最多领先四个批次，"
                           "队列满了就暂停。",
        "sampler_split": "每个 rank 得到同样多的索引（带斜线的是为补齐而重复的索引），"
                         "而 set_epoch 让每个轮次都有一个所有 rank 一致的新顺序。",
        "shard_assignment": "每个分片只交给一个 (rank, 工作进程)：分片先按 rank 分，再按工作进程分，"
                            "所以没有样本被读两次。",
        "ring_allreduce": "归约散射之后每个 rank 持有一块完整求和的结果（Σ），全收集再把它们传遍整个环；"
                          "每个 rank 始终只和相邻的 rank 通信。",
        "ddp_buckets": "有了梯度分桶，最后几层梯度的全归约与前面几层的反向传播同时进行，"
                       "所以优化器更新能更早开始。",
        "zero_stages": "零冗余优化器每升一个阶段，就多把一种状态分片到 4 个 rank 上（填色 = 持有）："
                       "每个 rank 为每个参数持有的字节数从 16 降到 4。",
        "fsdp_unit": "一个块的完整参数只在它自己的前向和反向传播期间存在；其余时间每个 rank 只持有"
                     "自己的分片，以及自己的梯度分片。",
        "dcp_reshard": "检查点的两个文件按行切分，而不是按 rank 切分：三个 rank 各自读取需要的行来加载它，"
                       "中间的 rank 要从两个文件里读。",
        "loader_resume": "第 3 步保存的状态是一个位置，而不是数据：恢复后的 `StatefulDataLoader`"
                         "（即使换了种子）从第 4 步起产出的批次与不中断运行时完全相同，而普通的 "
                         "`DataLoader` 会从头开始这个轮次，把前三个批次重复一遍。",
        "elastic_rendezvous": "每次成员变化都是一轮新的 rendezvous，并以新的 world size 从最新的检查点重启；"
                              "只有离开会用掉一次 --max-restarts。",
        "your_data_path": "你的图片走的是本课程的路线：两种布局任选其一，然后是三种管道之一（解码、uint8 缓存、"
                          "分片），再用 DDP 或 FSDP 在任意数量的 rank 上训练；检查点记下类别列表，"
                          "所以换了类别的恢复会被拒绝，而不是用错的标签继续训练。",
    },
}


def labels_for(diagram: str, language: str) -> dict[str, str]:
    """The words of ``diagram`` in ``language`` (``"en"`` or ``"zh"``).

    Raises:
        ValueError: For a language or diagram without a table.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    if language not in LABELS:
        raise ValueError(f"no labels for language {language!r}; choose one of {LANGUAGES}")
    table = LABELS[language]
    if diagram not in table:
        raise ValueError(f"no labels for diagram {diagram!r} in {language!r}")
    return table[diagram]
