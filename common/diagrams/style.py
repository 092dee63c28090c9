"""The look every diagram shares: one colour-blind-safe palette, boxes, arrows, a canvas in inches.

A diagram draws on a *canvas*: an axes without ticks whose data units are inches of the figure
(``canvas(ax, 8, 3)``), so "0.3 wide" means the same on every diagram and text sizes in points
line up with boxes in inches. Colours are the Okabe-Ito palette (safe for the common forms of
colour blindness), each with one role that stays the same across the diagrams: rank 0 is always
blue, communication always vermillion.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

#: Okabe & Ito (2008), "Color Universal Design".
OKABE_ITO = {"orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
             "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#999999"}

#: One colour per role, the same in every diagram.
ROLE = {"data": OKABE_ITO["yellow"], "compute": OKABE_ITO["sky"], "comm": OKABE_ITO["vermillion"],
        "wait": OKABE_ITO["grey"], "store": OKABE_ITO["green"], "control": OKABE_ITO["purple"]}

#: Rank (or consumer) ``i`` is drawn in ``RANKS[i]``.
RANKS = (OKABE_ITO["blue"], OKABE_ITO["orange"], OKABE_ITO["green"], OKABE_ITO["purple"])

INK = "#222222"
FAINT = "#6B6B6B"
FONT_SIZE = 9.5


def tint(color: str, amount: float = 0.65) -> tuple[float, float, float]:
    """``color`` mixed with white (``amount`` = how much white): the fill under dark text.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    return tuple(c + (1 - c) * amount for c in to_rgb(color))


def canvas(ax: Axes | None, width: float, height: float) -> Axes:
    """An empty drawing area ``width`` x ``height`` inches: a new figure, or ``ax`` if given.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    if ax is None:
        fig = plt.figure(figsize=(width, height))
        ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.set_axis_off()
    return ax


def figure_of(ax: Axes) -> Figure:
    """The figure an axes belongs to (what every ``draw_*`` returns).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    return ax.get_figure()


def text(ax: Axes, x: float, y: float, words: str, *, size: float = FONT_SIZE,
         color: str = INK, ha: str = "center", va: str = "center", **kwargs) -> None:
    """Text at ``(x, y)`` inches, centred unless told otherwise.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    ax.text(x, y, words, fontsize=size, color=color, ha=ha, va=va, **kwargs)


def box(ax: Axes, x: float, y: float, w: float, h: float, words: str = "", *,
        color: str = OKABE_ITO["grey"], fill: float = 0.65, size: float = FONT_SIZE,
        round_: bool = True, dashed: bool = False, hatch: str | None = None,
        weight: str = "normal") -> None:
    """A box with its lower-left corner at ``(x, y)``: a tinted fill, an edge in ``color``.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    style = f"round,pad=0,rounding_size={min(0.06, h / 3, w / 3)}" if round_ else "square,pad=0"
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle=style, facecolor=tint(color, fill),
                                edgecolor=color, linewidth=1.1, hatch=hatch,
                                linestyle="--" if dashed else "-"))
    if words:
        text(ax, x + w / 2, y + h / 2, words, size=size, weight=weight)


def cell(ax: Axes, x: float, y: float, w: float, h: float, words: str = "", *,
         color: str | None = None, fill: float = 0.55, size: float = FONT_SIZE - 1,
         hatch: str | None = None) -> None:
    """A square-cornered cell of a row of chunks; ``color=None`` is an empty (not held) cell.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    face = tint(color, fill) if color else "white"
    edge = color if color else "#BBBBBB"
    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=edge, linewidth=0.9,
                           hatch=hatch))
    if words:
        text(ax, x + w / 2, y + h / 2, words, size=size, color=INK if color else FAINT)


def arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], *,
          color: str = INK, width: float = 1.1, curve: float = 0.0, style: str = "-|>",
          dashed: bool = False) -> None:
    """An arrow from ``start`` to ``end``; ``curve`` bends it (an arc's ``rad``).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=10, color=color,
                                 linewidth=width, connectionstyle=f"arc3,rad={curve}",
                                 shrinkA=1, shrinkB=1, linestyle="--" if dashed else "-"))


def bracket(ax: Axes, x0: float, x1: float, y: float, words: str, *, color: str = FAINT,
            below: bool = True, size: float = FONT_SIZE - 0.5) -> None:
    """A square bracket from ``x0`` to ``x1`` at height ``y``, labelled beneath (or above).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    tip = -0.07 if below else 0.07
    ax.plot([x0, x0, x1, x1], [y - tip, y, y, y - tip], color=color, linewidth=1.0)
    text(ax, (x0 + x1) / 2, y + (-0.14 if below else 0.14), words, size=size, color=color)


def legend(ax: Axes, x: float, y: float, items: list[tuple[str, str]], *, gap: float = 0.25,
           size: float = FONT_SIZE - 1) -> None:
    """A row of ``(colour, words)`` swatches starting at ``(x, y)``; each item as wide as its words.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    for color, words in items:
        box(ax, x, y - 0.07, 0.22, 0.14, color=color, round_=False)
        text(ax, x + 0.3, y, words, size=size, ha="left")
        x += 0.3 + gap + text_width(words, size)


def text_width(words: str, size: float = FONT_SIZE) -> float:
    """A generous width in inches of ``words`` at ``size`` points: CJK 1 em, Latin 0.6 em.

    The SVG keeps text as text and the reader's browser picks the font, so layout cannot
    measure the glyphs it will get: it reserves the widest a common font needs.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    ems = sum(1.0 if ord(ch) > 0x2E80 else 0.6 for ch in words)
    return ems * size / 72
