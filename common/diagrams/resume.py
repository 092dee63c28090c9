"""A loader stopped mid-epoch and resumed (chapter 6.3): torchdata's ``StatefulDataLoader`` continues
with the next batch, a plain ``DataLoader`` starts the epoch over.

``resume_timeline`` runs both loaders (in the main process, ``num_workers=0``) and reads the
saved ``state_dict()``; the diagram draws those numbers, so it cannot drift from what torchdata does.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from common.diagrams.labels import labels_for
from common.diagrams.style import (
    FAINT,
    FONT_SIZE,
    ROLE,
    arrow,
    box,
    bracket,
    canvas,
    cell,
    figure_of,
    text,
)

#: The timeline's first column (inches), the width of one step, the height of a batch's cell.
X0, STEP, HEIGHT = 2.0, 0.45, 0.32


@dataclass(frozen=True)
class ResumeTimeline:
    """One epoch of a shuffling loader, stopped after ``stop_after`` batches and resumed.

    ``full``: the uninterrupted epoch's batches. ``resumed``: the number (1-based, in ``full``)
    of each batch a ``StatefulDataLoader`` yields after ``load_state_dict``. ``restarted``: the
    same for a plain ``DataLoader`` started again, numbered in its own uninterrupted epoch. The
    other fields are read from the saved ``state_dict()``.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """

    full: list[list[int]]
    resumed: list[int]
    restarted: list[int]
    stop_after: int
    batches_yielded: int
    samples_yielded: int
    generator_bytes: int


def _numbers(batches: list[list[int]], epoch: list[list[int]], what: str) -> list[int]:
    where = {tuple(batch): k + 1 for k, batch in enumerate(epoch)}
    missing = [batch for batch in batches if tuple(batch) not in where]
    if missing:
        raise ValueError(f"{what}: batch {missing[0]} is not a batch of the uninterrupted epoch")
    return [where[tuple(batch)] for batch in batches]


def _state_value(state: dict, *keys: str):
    value = state
    for depth, key in enumerate(keys):
        if not isinstance(value, dict) or key not in value:
            raise ValueError(f"StatefulDataLoader.state_dict() has no {'.'.join(keys[:depth + 1])}"
                             " (another torchdata version?)")
        value = value[key]
    return value


def resume_timeline(*, num_samples: int = 40, batch_size: int = 4, stop_after: int = 3,
                    seed: int = 0) -> ResumeTimeline:
    """Stop a ``StatefulDataLoader`` after ``stop_after`` batches, resume it from its state (in a
    loader with another seed), and restart a plain ``DataLoader``; in the main process only.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torchdata.stateful_dataloader import StatefulDataLoader

    dataset = TensorDataset(torch.arange(num_samples))

    def batches(loader) -> list[list[int]]:
        return [batch[0].tolist() for batch in loader]

    def stateful(generator_seed: int) -> StatefulDataLoader:
        return StatefulDataLoader(dataset, batch_size=batch_size, shuffle=True,
                                  generator=torch.Generator().manual_seed(generator_seed))

    def plain() -> DataLoader:
        return DataLoader(dataset, batch_size=batch_size, shuffle=True,
                          generator=torch.Generator().manual_seed(seed))

    with warnings.catch_warnings():  # torchdata 0.11 calls the deprecated torch.set_vital
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
        full = batches(stateful(seed))
        loader = stateful(seed)
        iterator = iter(loader)
        for _ in range(stop_after):
            next(iterator)
        state = loader.state_dict()
        resumed = stateful(seed + 99)  # another seed: the state decides the order
        resumed.load_state_dict(state)
        resumed_batches = batches(resumed)
    sampler = _state_value(state, "_sampler_iter_state")
    return ResumeTimeline(
        full=full, resumed=_numbers(resumed_batches, full, "resumed"),
        restarted=_numbers(batches(plain()), batches(plain()), "restarted"),
        stop_after=stop_after, batches_yielded=int(_state_value(state, "_num_yielded")),
        samples_yielded=int(_state_value(sampler, "samples_yielded")),
        generator_bytes=int(_state_value(sampler, "sampler_iter_state", "generator").numel()))


def _timeline_row(ax: Axes, y: float, first: int, numbers: list[int], words: dict[str, str], *,
                  repeats: int = 0, color: str = ROLE["compute"]) -> None:
    """Batches ``numbers`` in the columns of steps ``first, first + 1, ...``; the first
    ``repeats`` hatched (seen before the stop)."""
    for k, number in enumerate(numbers):
        again = k < repeats
        cell(ax, X0 + (first - 1 + k) * STEP, y, STEP, HEIGHT, words["batch"].format(number),
             color=ROLE["comm"] if again else color, hatch="////" if again else None)


def draw_loader_resume(ax: Axes | None = None, *, language: str = "en") -> Figure:
    """A shuffled epoch stopped after step 3: ``StatefulDataLoader`` resumes with batch 4, a plain
    ``DataLoader`` starts the epoch over; what the loader's ``state_dict()`` holds.

    Introduced in chapters/06_3_compile_and_resumable_loaders.ipynb.
    """
    words = labels_for("loader_resume", language)
    run = resume_timeline()
    k, steps = run.stop_after, run.stop_after + len(run.restarted)
    ax = canvas(ax, 8.0, 3.6)
    x0, w, h = X0, STEP, HEIGHT
    text(ax, x0 - 0.08, 3.35, words["step"], ha="right", size=FONT_SIZE - 1.5, color=FAINT)
    for step in range(1, steps + 1):
        text(ax, x0 + (step - 0.5) * w, 3.35, str(step), size=FONT_SIZE - 1.5, color=FAINT)
    rows = (("full", 2.8), ("resumed", 2.25), ("restarted", 1.7))
    for key, y in rows:
        text(ax, x0 - 0.08, y + h / 2, words[key], ha="right", size=FONT_SIZE - 1.5)
    _timeline_row(ax, 2.8, 1, list(range(1, len(run.full) + 1)), words)
    _timeline_row(ax, 2.25, k + 1, run.resumed, words, color=ROLE["store"])
    repeats = sum(1 for number in run.restarted if number <= k)
    _timeline_row(ax, 1.7, k + 1, run.restarted, words, repeats=repeats)
    if run.resumed == list(range(k + 1, len(run.full) + 1)):
        text(ax, x0 + len(run.full) * w + 0.08, 2.25 + h / 2, words["same"], ha="left",
             size=FONT_SIZE - 1.5, color=ROLE["store"])
    stop = x0 + k * w
    ax.plot([stop, stop], [1.62, 3.2], color=ROLE["control"], linewidth=1.2, linestyle="--")
    text(ax, stop - 0.06, 1.47, words["stop"].format(k), ha="right", size=FONT_SIZE - 1.5,
         color=ROLE["control"])
    bracket(ax, stop, stop + repeats * w, 1.64, words["twice"], color=ROLE["comm"],
            size=FONT_SIZE - 2)
    arrow(ax, (stop, 1.6), (stop, 1.3), color=ROLE["control"], width=0.9)
    _state_box(ax, words, run)
    first = run.full[run.resumed[0] - 1]
    notes = [words["continues"].format(k + 1, run.resumed[0], first),
             words["restart_note"].format(repeats, steps)]
    for i, note in enumerate(notes):
        text(ax, 4.75, 1.0 - i * 0.42, note, ha="left", size=FONT_SIZE - 1.5)
    return figure_of(ax)


def _state_box(ax: Axes, words: dict[str, str], run: ResumeTimeline) -> None:
    box(ax, 0.2, 0.12, 4.35, 1.16, color=ROLE["control"], fill=0.88)
    lines = [(words["state"].format(run.stop_after), "bold"),
             (words["yielded"].format(run.batches_yielded), "normal"),
             (words["samples"].format(run.samples_yielded), "normal"),
             (words["generator"].format(run.generator_bytes), "normal"),
             (words["workers"], "normal"), (words["not_saved"], "normal")]
    for i, (line, weight) in enumerate(lines):
        text(ax, 0.32, 1.15 - i * 0.18, line, ha="left", size=FONT_SIZE - 1.5, weight=weight)
