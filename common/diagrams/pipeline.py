"""Diagrams of the data side: the pipeline's stages, worker prefetching, how indices and shards
are dealt out to ranks and workers (chapters 2, 3 and 5), and a learner's data through all of it
(chapter 7).

The sampler and shard diagrams draw what the real code computes (``DistributedSampler``,
``common.shards.dataset.split_shards``), so a picture cannot drift from the behaviour it shows.
"""

from __future__ import annotations

from itertools import pairwise

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from common.diagrams.labels import labels_for
from common.diagrams.style import (
    FAINT,
    FONT_SIZE,
    RANKS,
    ROLE,
    arrow,
    box,
    bracket,
    canvas,
    cell,
    figure_of,
    legend,
    text,
)


def draw_pipeline_stages(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """The five stages a sample passes on its way to the model, and which process runs each.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    words = labels_for("pipeline_stages", language)
    ax = canvas(ax, 8.0, 2.05)
    colors = [ROLE["store"], ROLE["data"], ROLE["data"], ROLE["data"], ROLE["compute"]]
    width, gap, y = 1.24, 0.35, 1.05
    for i, (stage, color) in enumerate(zip(("read", "decode", "transform", "collate", "device"),
                                           colors, strict=True)):
        x = 0.2 + i * (width + gap)
        box(ax, x, y, width, 0.62, words[stage], color=color, weight="bold")
        text(ax, x + width / 2, y + 0.86, words[f"{stage}_what"], size=FONT_SIZE - 1, color=FAINT)
        if i:
            arrow(ax, (x - gap + 0.03, y + 0.31), (x - 0.03, y + 0.31))
    left, step = 0.2, width + gap
    bracket(ax, left, left + 2 * step + width, 0.87, words["getitem"])
    bracket(ax, left + 3 * step, left + 3 * step + width, 0.87, words["collate_fn"])
    bracket(ax, left + 4 * step, left + 4 * step + width, 0.87, words["to_device"])
    bracket(ax, left, left + 3 * step + width, 0.33, words["worker"])
    bracket(ax, left + 4 * step, left + 4 * step + width, 0.33, words["main"])
    return figure_of(ax)


def prefetch_timeline(*, num_workers: int = 2, prefetch_factor: int = 2, num_batches: int = 8,
                      load: float = 1.5, step: float = 0.62) -> tuple[list, list]:
    """When each batch is loaded and trained on, by the DataLoader's rule for dispatching work.

    The loader hands out ``prefetch_factor * num_workers`` batches at the start, round-robin,
    then one more each time the training loop takes a batch. Returns ``(loads, steps)``:
    ``loads[b] = (worker, start, end)``, ``steps[b] = (ready, start, end)`` of batch ``b``.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    in_flight = prefetch_factor * num_workers
    free = [0.0] * num_workers
    loads, steps, main_free = [], [], 0.0
    for b in range(num_batches):
        worker = b % num_workers
        # batch b is handed out when the loop takes batch b - in_flight
        dispatched = steps[b - in_flight][1] if b >= in_flight else 0.0
        start = max(free[worker], dispatched)
        free[worker] = start + load
        loads.append((worker, start, start + load))
        begin = max(start + load, main_free)
        main_free = begin + step
        steps.append((start + load, begin, main_free))
    return loads, steps


def draw_loader_prefetch(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """Two workers load batches ahead of a training loop; the loop waits only for the first.

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    words = labels_for("loader_prefetch", language)
    loads, steps = prefetch_timeline(num_batches=9, load=0.8, step=0.75)
    ax = canvas(ax, 8.0, 2.75)
    x0, scale, h = 1.5, 0.82, 0.34
    rows = {0: 1.9, 1: 1.42, "main": 0.75}
    for worker in (0, 1):
        text(ax, x0 - 0.12, rows[worker] + h / 2, words["worker"].format(worker), ha="right")
    text(ax, x0 - 0.12, rows["main"] + h / 2, words["main"], ha="right")
    free = [0.0, 0.0]
    for b, (worker, start, end) in enumerate(loads):
        if start - free[worker] > 0.02:
            box(ax, x0 + free[worker] * scale, rows[worker], (start - free[worker]) * scale - 0.04,
                h, words["idle"], color=ROLE["wait"], size=FONT_SIZE - 1.5, dashed=True)
        box(ax, x0 + start * scale, rows[worker], (end - start) * scale - 0.04, h,
            words["batch"].format(b), color=RANKS[worker], size=FONT_SIZE - 1.5)
        free[worker] = end
    previous = 0.0
    for b, (ready, start, end) in enumerate(steps):
        if start - previous > 0.02:
            box(ax, x0 + previous * scale, rows["main"], (start - previous) * scale - 0.04, h,
                words["wait"], color=ROLE["wait"], size=FONT_SIZE - 1.5, dashed=True)
        box(ax, x0 + start * scale, rows["main"], (end - start) * scale - 0.04, h,
            words["step_n"].format(b), color=ROLE["compute"], size=FONT_SIZE - 1.5)
        worker = loads[b][0]
        arrow(ax, (x0 + ready * scale - 0.06, rows[worker]),
              (x0 + start * scale + 0.1, rows["main"] + h), color=RANKS[worker], width=0.6)
        previous = end
    arrow(ax, (x0, 0.58), (7.85, 0.58), color=FAINT, width=0.8)
    text(ax, 7.85, 0.46, words["time"], size=FONT_SIZE - 1.5, color=FAINT, ha="right")
    text(ax, x0, 2.55, words["rule"], size=FONT_SIZE - 0.5, ha="left")
    legend(ax, 0.2, 0.2, [(RANKS[0], words["load"]), (ROLE["compute"], words["step"]),
                          (ROLE["wait"], words["wait_long"])], size=FONT_SIZE - 1.5, gap=0.15)
    return figure_of(ax)


def draw_sampler_split(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """``DistributedSampler`` over 10 indices and 4 ranks, for two epochs: padded, then strided.

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """
    from torch.utils.data.distributed import DistributedSampler

    words = labels_for("sampler_split", language)
    size, world = 10, 4
    ax = canvas(ax, 8.0, 3.2)
    w, h = 0.34, 0.32
    for row, epoch in enumerate((0, 1)):
        samplers = [DistributedSampler(range(size), num_replicas=world, rank=r, seed=0)
                    for r in range(world)]
        for sampler in samplers:
            sampler.set_epoch(epoch)
        per_rank = [list(sampler) for sampler in samplers]
        order = [per_rank[i % world][i // world] for i in range(len(per_rank[0]) * world)]
        y = 2.3 - row * 1.45
        text(ax, 0.2, y + 0.62, words["epoch"].format(epoch), ha="left", weight="bold")
        for i, index in enumerate(order):
            padded = i >= size
            cell(ax, 0.2 + i * w, y, w, h, str(index), color=RANKS[i % world],
                 hatch="////" if padded else None)
        bracket(ax, 0.2 + size * w, 0.2 + len(order) * w, y - 0.08, words["padding"])
        arrow(ax, (0.3 + len(order) * w, y + h / 2), (4.75, y + h / 2), color=FAINT)
        for r, indices in enumerate(per_rank):
            ry = y + 0.5 - r * 0.28
            text(ax, 5.55, ry, words["rank"].format(r), ha="right", size=FONT_SIZE - 1)
            for j, index in enumerate(indices):
                cell(ax, 5.65 + j * 0.3, ry - 0.12, 0.3, 0.24, str(index), color=RANKS[r],
                     hatch="////" if (j * world + r) >= size else None)
    text(ax, 0.2, 0.2, words["note"], size=FONT_SIZE - 0.5, ha="left", color=FAINT)
    return figure_of(ax)


def draw_shard_assignment(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """Eight shards dealt to 2 ranks x 2 workers: by rank first, then by worker.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    from common.shards.order import split_shards

    words = labels_for("shard_assignment", language)
    world, workers, shards = 2, 2, 8
    assignment = split_shards(list(range(shards)), world_size=world, num_workers=workers)
    owner = {s: (r, w) for r, per in enumerate(assignment) for w, got in enumerate(per) for s in got}
    ax = canvas(ax, 8.0, 2.9)
    consumer_color = {(r, w): RANKS[r * workers + w] for r in range(world) for w in range(workers)}
    text(ax, 0.2, 2.62, words["order"], ha="left", weight="bold")
    sw = 0.86
    for s in range(shards):
        box(ax, 0.2 + s * (sw + 0.08), 2.0, sw, 0.4, words["shard"].format(s),
            color=consumer_color[owner[s]], size=FONT_SIZE - 1, round_=False)
    for r in range(world):
        rx = 0.2 + r * 3.9
        box(ax, rx, 0.2, 3.7, 1.2, color=FAINT, fill=0.92, dashed=True)
        text(ax, rx + 1.85, 0.38, words["rank"].format(r, world), weight="bold",
             size=FONT_SIZE - 0.5)
        for w in range(workers):
            wx = rx + 0.15 + w * 1.8
            got = ", ".join(str(s) for s in assignment[r][w])
            box(ax, wx, 0.6, 1.6, 0.62, words["worker"].format(w, got),
                color=consumer_color[(r, w)], size=FONT_SIZE - 1)
            for s in assignment[r][w]:
                arrow(ax, (0.2 + s * (sw + 0.08) + sw / 2, 2.0), (wx + 0.8, 1.22),
                      color=consumer_color[(r, w)], width=0.7)
    text(ax, 7.8, 2.62, words["rule"], ha="right", size=FONT_SIZE - 1.5, color=FAINT)
    return figure_of(ax)


def draw_your_data_path(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """A learner's images through the course: a layout, a pipeline, a trainer, a checkpoint.

    Introduced in chapters/07_your_data.ipynb.
    """
    words = labels_for("your_data_path", language)
    ax = canvas(ax, 8.0, 2.75)
    top = 2.45
    columns = [(0.1, 1.85, ("imagefolder", "csv"), ROLE["store"], "layout"),
               (2.3, 1.45, ("decode", "cache", "shards"), ROLE["data"], "pipeline"),
               (4.2, 1.5, ("ddp", "fsdp"), ROLE["compute"], "trainer")]
    centres = []
    for x, width, names, color, flag in columns:
        height = 1.5 / len(names) - 0.1
        ys = [0.55 + i * (height + 0.1) for i in reversed(range(len(names)))]
        for name, y in zip(names, ys, strict=True):
            box(ax, x, y, width, height, words[name], color=color, size=FONT_SIZE - 0.5)
        centres.append((x, width, [y + height / 2 for y in ys]))
        text(ax, x + width / 2, 0.3, words[flag], size=FONT_SIZE - 2, color=FAINT)
    text(ax, 0.1 + 1.85 / 2, top, words["yours"], weight="bold")
    for (x0, w0, ys0), (x1, _, ys1) in pairwise(centres):
        for y0 in ys0:
            for y1 in ys1:
                arrow(ax, (x0 + w0 + 0.03, y0), (x1 - 0.03, y1), color=FAINT, width=0.7)
    x, width = 6.2, 1.6
    box(ax, x, 1.0, width, 0.7, words["checkpoint"], color=ROLE["store"], weight="bold",
        size=FONT_SIZE - 0.5)
    text(ax, x + width / 2, 0.3, words["saved"], size=FONT_SIZE - 2, color=FAINT)
    trainer_x, trainer_w, trainer_ys = centres[-1]
    for y in trainer_ys:
        arrow(ax, (trainer_x + trainer_w + 0.03, y), (x - 0.03, 1.35))
    arrow(ax, (x + width / 2, 1.74), (trainer_x + trainer_w / 2, 2.12), curve=0.25,
          color=ROLE["control"], dashed=True)
    text(ax, (x + trainer_x + trainer_w) / 2 + 0.35, top, words["resume"], color=ROLE["control"],
         size=FONT_SIZE - 0.5)
    return figure_of(ax)
