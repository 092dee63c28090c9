"""Diagrams of the distributed side: ring all-reduce, DDP's buckets, ZeRO and FSDP sharding, DCP
resharding and an elastic rendezvous (chapters 4 and 6).
"""

from __future__ import annotations

import math

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from common.diagrams.labels import labels_for
from common.diagrams.style import (
    FAINT,
    FONT_SIZE,
    INK,
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
    tint,
)


def draw_ring_allreduce(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """Four ranks in a ring: reduce-scatter leaves each rank one summed chunk, all-gather spreads them.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    words = labels_for("ring_allreduce", language)
    world = 4
    ax = canvas(ax, 8.0, 2.9)
    cx, cy, radius = 1.2, 1.55, 0.78
    spots = [(cx + radius * math.sin(2 * math.pi * r / world),
              cy + radius * math.cos(2 * math.pi * r / world)) for r in range(world)]
    for r, (x, y) in enumerate(spots):
        nx, ny = spots[(r + 1) % world]
        arrow(ax, (x + (nx - x) * 0.28, y + (ny - y) * 0.28), (x + (nx - x) * 0.72, y + (ny - y) * 0.72),
              color=ROLE["comm"], curve=-0.25, width=1.4)
    for r, (x, y) in enumerate(spots):
        box(ax, x - 0.3, y - 0.17, 0.6, 0.34, words["rank"].format(r), color=RANKS[r])
    text(ax, cx, 0.27, words["ring"], size=FONT_SIZE - 1.5, color=FAINT)
    letters = "abcd"
    stages = [("start", lambda r, c: (letters[r] + str(c), RANKS[r], None)),
              ("after_rs", lambda r, c: ("Σ" + str(c), INK, None) if c == (r + 1) % world
               else ("", None, None)),
              ("after_ag", lambda r, c: ("Σ" + str(c), INK, None))]
    w, h = 0.28, 0.3
    for k, (stage, content) in enumerate(stages):
        gx = 2.9 + k * 1.9
        text(ax, gx + 2 * w, 2.62, words[stage], size=FONT_SIZE - 0.5, weight="bold")
        for r in range(world):
            gy = 2.05 - r * 0.42
            for c in range(world):
                label, color, _ = content(r, c)
                cell(ax, gx + c * w, gy, w, h, label, color=ROLE["store"] if color == INK else color,
                     fill=0.45 if color == INK else 0.55)
            if k == 0:
                text(ax, gx - 0.08, gy + h / 2, str(r), ha="right", size=FONT_SIZE - 1, color=FAINT)
        if k:
            arrow(ax, (gx - 0.66, 1.3), (gx - 0.12, 1.3), color=ROLE["comm"], width=1.4)
            text(ax, gx - 0.39, 1.58, words["steps"], size=FONT_SIZE - 1.5, color=ROLE["comm"])
    text(ax, 5.36, 0.3, words["cost"], size=FONT_SIZE - 1.5, color=FAINT)
    return figure_of(ax)


def draw_ddp_buckets(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """Backward with one all-reduce at the end, then with buckets all-reduced while backward runs.

    Introduced in chapters/04_1_ddp_fundamentals.ipynb.
    """
    words = labels_for("ddp_buckets", language)
    ax = canvas(ax, 8.0, 3.3)
    x0, h, grad, reduce_each = 1.55, 0.34, 0.62, 0.52
    layers = [4, 3, 2, 1]
    ends = {}
    for row, bucketed in enumerate((False, True)):
        y = 2.2 - row * 1.4
        text(ax, 0.15, y + 0.8, words["bucketed" if bucketed else "single"], ha="left",
             weight="bold")
        text(ax, x0 - 0.1, y + h / 2, words["compute"], ha="right", size=FONT_SIZE - 1)
        text(ax, x0 - 0.1, y - 0.42 + h / 2, words["comm"], ha="right", size=FONT_SIZE - 1)
        for i, layer in enumerate(layers):
            box(ax, x0 + i * grad, y, grad - 0.04, h, words["grad"].format(layer),
                color=ROLE["compute"], size=FONT_SIZE - 1.5)
        if bucketed:
            for b in range(2):
                box(ax, x0 + (2 * b + 2) * grad, y - 0.42, 2 * reduce_each - 0.04, h,
                    words["bucket"].format(b, layers[2 * b], layers[2 * b + 1]),
                    color=ROLE["comm"], size=FONT_SIZE - 1.5)
                bracket(ax, x0 + 2 * b * grad, x0 + (2 * b + 2) * grad - 0.04, y + h + 0.06,
                        words["fills"].format(b), below=False, size=FONT_SIZE - 2)
            end = x0 + 4 * grad + 2 * reduce_each
        else:
            box(ax, x0 + 4 * grad, y - 0.42, 4 * reduce_each - 0.04, h, words["all"],
                color=ROLE["comm"], size=FONT_SIZE - 1.5)
            end = x0 + 4 * grad + 4 * reduce_each
        box(ax, end, y, 0.6, h, words["step"], color=ROLE["store"], size=FONT_SIZE - 1.5)
        ends[bucketed] = (end, y)
    (late, top), (early, low) = ends[False], ends[True]
    ax.plot([early, early], [low + h + 0.05, top + h], color=FAINT, linewidth=0.9, linestyle="--")
    arrow(ax, (late - 0.03, top + h + 0.12), (early + 0.03, top + h + 0.12), color=ROLE["store"],
          width=1.2)
    text(ax, (late + early) / 2, top + h + 0.27, words["saved"], size=FONT_SIZE - 1.5,
         color=ROLE["store"])
    arrow(ax, (x0, 0.2), (7.9, 0.2), color=FAINT, width=0.8)
    text(ax, 7.9, 0.07, words["time"], size=FONT_SIZE - 1.5, color=FAINT, ha="right")
    return figure_of(ax)


def draw_zero_stages(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """What each rank holds under DDP and ZeRO stages 1, 2, 3 (= FSDP): filled = held.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    from common.fsdp.sharding import bytes_per_rank

    words = labels_for("zero_stages", language)
    world, million = 4, 1_000_000
    ax = canvas(ax, 8.0, 3.1)
    parts = [("params", 0.34, ROLE["compute"]), ("grads", 0.34, ROLE["comm"]),
             ("optim", 0.68, ROLE["store"])]
    for stage in range(4):
        gx = 0.55 + stage * 1.9
        text(ax, gx + 0.68, 2.85, words[f"stage{stage}"], weight="bold", size=FONT_SIZE - 0.5)
        for r in range(world):
            y = 2.3 - r * 0.36
            if stage == 0:
                text(ax, 0.45, y + 0.13, words["rank"].format(r), ha="right", size=FONT_SIZE - 1.5)
            x = gx
            for k, (_, length, color) in enumerate(parts):
                sharded = stage >= {0: 3, 1: 2, 2: 1}[k]
                for q in range(world):
                    held = not sharded or q == r
                    cell(ax, x + q * length / world, y, length / world, 0.26,
                         color=color if held else None)
                x += length + 0.04
        text(ax, gx + 0.68, 0.78, words["bytes"].format(
            bytes_per_rank(million, world_size=world, stage=stage) / million),
             size=FONT_SIZE - 1)
    legend(ax, 0.55, 0.35, [(ROLE["compute"], words["params"]), (ROLE["comm"], words["grads"]),
                            (ROLE["store"], words["optim"])])
    return figure_of(ax)


def _halves(ax: Axes, x: float, y: float, held: list[list[bool]], color: str) -> None:
    """Two ranks' rows of a block's parameter: two halves each, filled where held."""
    for r, row in enumerate(held):
        for q, got in enumerate(row):
            cell(ax, x + q * 0.32, y - r * 0.3, 0.32, 0.24, color=color if got else None)


def draw_fsdp_unit(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """One FSDP block on 2 ranks: all-gather before forward and backward, reduce-scatter after.

    Introduced in chapters/06_1_fsdp_sharding.ipynb.
    """
    words = labels_for("fsdp_unit", language)
    ax = canvas(ax, 8.0, 3.0)
    shard, full = [[True, False], [False, True]], [[True, True], [True, True]]
    flows = [("forward", 2.25, [("shard", shard, ROLE["compute"]), ("gather", None, None),
                                ("full", full, ROLE["compute"]), ("fwd", None, None),
                                ("free", shard, ROLE["compute"])]),
             ("backward", 0.95, [("shard", shard, ROLE["compute"]), ("gather", None, None),
                                 ("full", full, ROLE["compute"]), ("bwd", None, None),
                                 ("grads_full", full, ROLE["comm"]), ("scatter", None, None),
                                 ("grads_shard", shard, ROLE["comm"]), ("opt", None, None),
                                 ("updated", shard, ROLE["store"])])]
    for title, y, items in flows:
        text(ax, 0.15, y + 0.45, words[title], ha="left", weight="bold")
        x = 0.3
        for key, held, color in items:
            if held is None:
                op_color = ROLE["comm"] if key in ("gather", "scatter") else INK
                arrow(ax, (x, y), (x + 0.72, y), color=op_color, width=1.4)
                text(ax, x + 0.36, y + 0.18, words[key], size=FONT_SIZE - 1.5, color=op_color)
                x += 0.82
                continue
            _halves(ax, x, y + 0.05, held, color)
            text(ax, x + 0.32, y - 0.5, words[key], size=FONT_SIZE - 1.5, color=FAINT)
            x += 0.72
    for y in (2.25, 0.95):
        for r in range(2):
            text(ax, 0.2, y + 0.17 - r * 0.3, words["rank"].format(r), ha="right",
                 size=FONT_SIZE - 2, color=FAINT)
    text(ax, 7.85, 0.15, words["ranks"], ha="right", size=FONT_SIZE - 1, color=FAINT)
    return figure_of(ax)


def draw_dcp_reshard(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """A 6-row tensor saved by 2 ranks (2 files) and loaded on 3: each rank reads only its rows.

    Introduced in chapters/06_2_distributed_checkpoints.ipynb.
    """
    words = labels_for("dcp_reshard", language)
    rows, saved, loaded = 6, 2, 3
    per_file, per_rank = rows // saved, rows // loaded
    ax = canvas(ax, 8.0, 3.75)
    h, w = 0.27, 0.95
    text(ax, 1.0, 3.55, words["saved"].format(saved), weight="bold")
    text(ax, 6.7, 3.55, words["loaded"].format(loaded), weight="bold")
    left = {}
    for f in range(saved):
        top = 3.2 - f * 1.5
        box(ax, 0.2, top - per_file * h - 0.42, 1.6, per_file * h + 0.42, color=RANKS[f], fill=0.9)
        text(ax, 1.0, top - 0.17, words["file"].format(f), size=FONT_SIZE - 1.5, family="monospace")
        for k in range(per_file):
            row = f * per_file + k
            y = top - 0.34 - (k + 1) * h
            cell(ax, 0.52, y, w, h, words["row"].format(row), color=RANKS[f])
            left[row] = (0.52 + w, y + h / 2)
    box(ax, 2.55, 2.95, 2.6, 0.5, words["metadata"], color=ROLE["control"], size=FONT_SIZE - 1.5)
    arrow(ax, (5.2, 3.2), (5.75, 3.0), color=ROLE["control"], dashed=True, width=0.9)
    for r in range(loaded):
        top = 3.2 - r * 1.0
        box(ax, 5.8, top - per_rank * h - 0.2, 2.0, per_rank * h + 0.2, color=RANKS[r], fill=0.9)
        text(ax, 5.92, top - 0.1 - per_rank * h / 2, words["rank"].format(r), ha="left",
             size=FONT_SIZE - 1)
        for k in range(per_rank):
            row = r * per_rank + k
            y = top - 0.1 - (k + 1) * h
            cell(ax, 6.7, y, w, h, words["row"].format(row), color=RANKS[row // per_file])
            sx, sy = left[row]
            arrow(ax, (sx + 0.05, sy), (6.65, y + h / 2), color=FAINT, width=0.8)
    text(ax, 4.0, 0.12, words["note"], size=FONT_SIZE - 1.5, color=FAINT)
    return figure_of(ax)


def draw_elastic_rendezvous(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """Two torchrun agents over time: each join or leave is a new rendezvous round at a new world size.

    Introduced in chapters/06_4_elastic_training.ipynb.
    """
    words = labels_for("elastic_rendezvous", language)
    ax = canvas(ax, 8.0, 2.95)
    h, band = 0.5, 0.3
    rows = {"A": 1.85, "B": 1.1}
    for agent, y in rows.items():
        text(ax, 1.35, y + h / 2, words["agent"].format(agent), ha="right")
    rounds = [1.5, 3.6, 5.95]
    for k, x in enumerate(rounds):
        ax.add_patch(Rectangle((x, 0.98), band, 1.48, facecolor=tint(ROLE["control"], 0.7),
                               edgecolor="none"))
        text(ax, x + band / 2, 2.62, words["round"].format(k), size=FONT_SIZE - 1.5,
             color=ROLE["control"])
    trains = [(rounds[0] + band + 0.05, rounds[1] - 0.05, "A", words["train"].format(1)),
              (rounds[1] + band + 0.05, rounds[2] - 0.05, "AB", words["resume"].format(2)),
              (rounds[2] + band + 0.05, 7.9, "A", words["resume"].format(1))]
    for start, end, members, label in trains:
        for rank, agent in enumerate(members):
            box(ax, start, rows[agent], end - start, h, label + "\n" + words["rank"].format(rank),
                color=RANKS[rank], size=FONT_SIZE - 1.5)
    box(ax, 2.5, rows["B"], rounds[1] - 0.05 - 2.5, h, words["waits"], color=ROLE["wait"],
        dashed=True, size=FONT_SIZE - 1.5)
    text(ax, rounds[2] + 0.02, rows["B"] + h / 2, "✕", color=ROLE["comm"], size=FONT_SIZE + 3,
         weight="bold")
    text(ax, rounds[2] + band + 0.1, rows["B"] + h / 2, words["dies"], color=ROLE["comm"],
         size=FONT_SIZE - 1, ha="left")
    text(ax, rounds[1] + band / 2, 0.68, words["join"], size=FONT_SIZE - 1.5, color=FAINT)
    text(ax, rounds[2] + band / 2, 0.68, words["leave"], size=FONT_SIZE - 1.5, color=FAINT)
    arrow(ax, (1.45, 0.25), (7.9, 0.25), color=FAINT, width=0.8)
    text(ax, 7.9, 0.1, words["time"], size=FONT_SIZE - 1.5, color=FAINT, ha="right")
    return figure_of(ax)
