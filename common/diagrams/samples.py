"""Diagrams of one sample's way through a Dataset: the transform presets step by step (chapter 2.2)
and the annotations CSV -> ``__getitem__`` -> ``PadCollate`` path (chapter 2.3).

Both draw what the real code does: ``transform_steps`` runs the presets of ``common.transforms``
on an image and finds out which steps are random by calling each with several seeds, and the
batch is what ``common.PadCollate`` returns for samples of the sizes shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from common.diagrams.labels import labels_for
from common.diagrams.style import (
    FAINT,
    FONT_SIZE,
    OKABE_ITO,
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

#: A random step and a deterministic one (the legend names them).
RANDOM, FIXED = OKABE_ITO["purple"], ROLE["data"]


@dataclass(frozen=True)
class TransformStep:
    """One step of a transform pipeline, as ``transform_steps`` found it.

    ``kind`` and ``shape`` describe the step's output: ``"PIL"`` and ``"W×H"``, or a tensor's
    dtype (``"uint8"``, ``"float32"``) and ``"C×H×W"``.

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """

    name: str
    random: bool
    kind: str
    shape: str


def _describe(image) -> tuple[str, str]:
    import torch

    if isinstance(image, torch.Tensor):
        return str(image.dtype).removeprefix("torch."), "×".join(str(n) for n in image.shape)
    width, height = image.size
    return "PIL", f"{width}×{height}"


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and torch.equal(a, b)
    return a.size == b.size and a.tobytes() == b.tobytes()


def transform_steps(steps: Sequence[Callable], image, *, draws: int = 8) -> list[TransformStep]:
    """Run ``steps`` one after the other on ``image``: each step's output, and whether it is random.

    A step is random when ``draws`` calls with seeds ``0 .. draws-1`` do not all give the same
    output; the next step gets the output of seed 0. Torch's global RNG is restored afterwards.

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """
    import torch

    found = []
    for step in steps:
        outputs = []
        with torch.random.fork_rng(devices=[]):
            for seed in range(draws):
                torch.manual_seed(seed)
                outputs.append(step(image))
        image = outputs[0]
        found.append(TransformStep(type(step).__name__,
                                   any(not _same(image, other) for other in outputs[1:]),
                                   *_describe(image)))
    return found


def sample_image(width: int = 96, height: int = 80):
    """A fixed noise image (noise, so that every flip, crop or jitter changes it).

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _lines(name: str, width: int = 8) -> str:
    """``RandomHorizontalFlip`` -> ``Random\\nHorizontal\\nFlip``: camel-case words, joined up to ``width``."""
    lines: list[str] = []
    for word in re.findall(r"[A-Z][a-z]*|[a-z]+|\d+", name):
        if lines and len(lines[-1]) + len(word) <= width:
            lines[-1] += word
        else:
            lines.append(word)
    return "\n".join(lines)


def _spans(names: list[str], reference: list[str]) -> list[tuple[float, float]]:
    """``(first column, columns)`` of each step: a step of ``reference`` stays in its column, the
    others share the columns between their neighbours evenly."""
    anchors = [reference.index(n) if n in reference else None for n in names]
    spans: list[tuple[float, float]] = []
    i = 0
    while i < len(names):
        if anchors[i] is not None:
            spans.append((anchors[i], 1.0))
            i += 1
            continue
        j = i
        while j < len(names) and anchors[j] is None:
            j += 1
        left = anchors[i - 1] + 1 if i else 0
        right = anchors[j] if j < len(names) else len(reference)
        share = (right - left) / (j - i)
        spans.extend((left + k * share, share) for k in range(j - i))
        i = j
    return spans


def _row(ax: Axes, steps: list[TransformStep], spans, y: float, x0: float, pitch: float) -> None:
    """One preset: a box per step (random or not), its output under it where dtype or shape change."""
    h, gap, before = 0.56, 0.16, ("PIL", "")
    for k, (step, (first, columns)) in enumerate(zip(steps, spans, strict=True)):
        x, w = x0 + first * pitch, columns * pitch - gap
        box(ax, x, y, w, h, _lines(step.name, round(8 * columns)),
            color=RANDOM if step.random else FIXED,
            size=FONT_SIZE - 2)
        if (step.kind, step.shape) != before:
            text(ax, x + w / 2, y - 0.2, f"{step.kind}\n{step.shape}", size=FONT_SIZE - 2.5,
                 color=FAINT)
            before = (step.kind, step.shape)
        if k:
            arrow(ax, (x - gap + 0.01, y + h / 2), (x - 0.01, y + h / 2), width=0.8)


def draw_transform_pipeline(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """The v2 train and eval presets step by step: random steps, deterministic steps, what each outputs.

    Introduced in chapters/02_2_transforms_augmentation.ipynb.
    """
    from common.transforms import V2EvalPreset, V2TrainPreset

    words = labels_for("transform_pipeline", language)
    image = sample_image()
    presets = [("train", V2TrainPreset(crop_size=64), 2.25),
               ("eval", V2EvalPreset(resize_size=72, crop_size=64), 1.05)]
    rows = [(key, preset, transform_steps(preset.pipeline.transforms, image), y)
            for key, preset, y in presets]
    reference = [step.name for step in rows[0][2]]
    outputs = {(steps[-1].kind, steps[-1].shape) for _, _, steps, _ in rows}
    if len(outputs) != 1:
        raise ValueError(f"the presets end in different outputs: {sorted(outputs)}")
    ax = canvas(ax, 8.0, 3.2)
    x0, x1, h = 1.3, 6.95, 0.56
    pitch = (x1 - x0 + 0.16) / len(reference)
    box(ax, 0.2, 1.05, 0.85, 1.76, words["input"] + "\n" + "{}×{}".format(*image.size),
        color=ROLE["store"], size=FONT_SIZE - 1)
    kind, shape = outputs.pop()
    box(ax, 7.05, 1.05, 0.75, 1.76, f"{words['output']}\n{kind}\n{shape}", color=ROLE["compute"],
        size=FONT_SIZE - 1)
    for key, preset, steps, y in rows:
        text(ax, x0, y + h + 0.17, words[key].format(type(preset).__name__), ha="left",
             weight="bold", size=FONT_SIZE - 0.5)
        spans = _spans([step.name for step in steps], reference)
        _row(ax, steps, spans, y, x0, pitch)
        arrow(ax, (1.06, y + h / 2), (x0 - 0.01, y + h / 2), width=0.8)
        last = x0 + (spans[-1][0] + spans[-1][1]) * pitch - 0.16
        arrow(ax, (last + 0.01, y + h / 2), (7.04, y + h / 2), width=0.8)
    text(ax, 7.8, 2.98, words["types"], ha="right", size=FONT_SIZE - 1.5, color=FAINT)
    bracket(ax, 0.2, 7.8, 0.55, words["getitem"])
    legend(ax, 0.2, 0.15, [(RANDOM, words["random"]), (FIXED, words["fixed"])],
           size=FONT_SIZE - 1.5)
    return figure_of(ax)


#: The annotations rows the collate diagram starts from: file, label, image size (h, w).
ROWS = (("img_00000.jpg", 5, (48, 64)), ("img_00001.jpg", 2, (64, 40)),
        ("img_00002.jpg", 5, (40, 40)), ("img_00003.jpg", 0, (56, 56)))


def collate_batch(rows: Sequence[tuple[str, int, tuple[int, int]]] = ROWS):
    """What ``PadCollate`` and ``balanced_sampler`` make of ``rows``: ``(images, labels, sizes, weights)``.

    Each row's sample is a 3-channel image of its size (ones, so the padding, zeros, stands out).

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """
    import torch

    from common.loaders import PadCollate, balanced_sampler

    samples = [(torch.ones(3, h, w), label) for _, label, (h, w) in rows]
    images, labels, sizes = PadCollate()(samples)
    weights = balanced_sampler([label for _, label, _ in rows]).weights
    return images, labels, sizes, weights.tolist()


def _csv(ax: Axes, words: dict[str, str], rows, weights: list[float], ys: list[float]) -> None:
    box(ax, 0.15, 0.45, 1.9, 2.4, color=ROLE["store"], fill=0.88)
    text(ax, 0.3, 2.62, "file_name,label", ha="left", size=FONT_SIZE - 1.5, color=FAINT,
         family="monospace")
    for (name, label, _), weight, y in zip(rows, weights, ys, strict=True):
        text(ax, 0.3, y, f"{name},{label}", ha="left", size=FONT_SIZE - 1.5, family="monospace")
        text(ax, 1.97, y, words["weight"].format(Fraction(weight).limit_denominator(100)),
             ha="right", size=FONT_SIZE - 1.5, color=RANDOM)
        arrow(ax, (2.07, y), (2.28, y), width=0.8)
    text(ax, 0.15, 0.2, words["sampler"], ha="left", size=FONT_SIZE - 1.5, color=RANDOM)


def _dataset(ax: Axes, words: dict[str, str]) -> None:
    box(ax, 2.3, 0.45, 1.5, 2.4, color=ROLE["data"], fill=0.8)
    for k, key in enumerate(("getitem", "row", "load", "transform", "returns")):
        text(ax, 3.05, 2.45 - k * 0.42, words[key], size=FONT_SIZE - 1.5,
             weight="bold" if k == 0 else "normal")


def draw_collate_path(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """Annotations rows -> ``CustomImageDataset.__getitem__`` -> samples of their own sizes ->
    ``PadCollate`` -> one padded batch; the balanced sampler's weight beside each row.

    Introduced in chapters/02_3_custom_datasets.ipynb.
    """
    words = labels_for("collate_path", language)
    images, labels, sizes, weights = collate_batch(ROWS)
    ax = canvas(ax, 8.0, 3.25)
    scale, ys = 0.0065, [2.2 - 0.5 * i for i in range(len(ROWS))]
    for x, key in ((1.1, "csv"), (3.05, "dataset"), (4.45, "samples"), (6.6, "batch")):
        text(ax, x, 3.07, words[key], weight="bold", size=FONT_SIZE - 0.5)
    _csv(ax, words, ROWS, weights, ys)
    _dataset(ax, words)
    side = images.shape[-1] * scale
    box(ax, 5.33, 0.42, 2.52, 2.38, color=FAINT, fill=0.95, dashed=True)
    text(ax, 6.59, 2.6, words["shapes"].format(tuple(images.shape), tuple(labels.shape),
                                               tuple(sizes.shape)), size=FONT_SIZE - 1.5)
    for (_, _, (h, w)), label, (bh, bw), y in zip(ROWS, labels.tolist(), sizes.tolist(), ys,
                                                  strict=True):
        arrow(ax, (3.82, y), (3.98, y), width=0.8)
        cell(ax, 4.0, y - h * scale / 2, w * scale, h * scale, color=ROLE["data"])
        text(ax, 4.47, y, f"3×{h}×{w}", ha="left", size=FONT_SIZE - 1.5)
        arrow(ax, (5.05, y), (5.42, y), width=0.8)
        top = y + side / 2
        cell(ax, 5.47, top - side, side, side, hatch="////")
        cell(ax, 5.47, top - bh * scale, bw * scale, bh * scale, color=ROLE["data"])
        text(ax, 5.97, y, words["item"].format(label, bh, bw), ha="left", size=FONT_SIZE - 1.5)
    text(ax, 7.85, 0.2, words["note"], ha="right", size=FONT_SIZE - 1.5, color=FAINT)
    return figure_of(ax)
