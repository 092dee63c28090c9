"""Conceptual diagrams of the chapters, drawn by code: ``python -m common.diagrams --out chapters/figures``.

Every diagram is a function ``draw_<name>(ax=None, *, language="en")`` that returns its figure,
so a notebook can also draw one inline. The committed pictures are SVG files written by
``render_svg``: text stays text (``svg.fonttype = "none"``, so the files diff and a browser draws the
Chinese in the reader's fonts), and the ids and metadata are fixed (``svg.hashsalt``, no date), so
rendering again gives the same bytes. English goes to ``OUT/<name>.svg``, Chinese to
``OUT/zh/<name>.svg``; ``tests/test_diagrams.py`` checks that the committed files are what the code
draws today.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib import font_manager
from matplotlib.figure import Figure

from common.diagrams.labels import CAPTIONS, LABELS, LANGUAGES, labels_for
from common.diagrams.parallel import (
    draw_dcp_reshard,
    draw_ddp_buckets,
    draw_elastic_rendezvous,
    draw_fsdp_unit,
    draw_ring_allreduce,
    draw_zero_stages,
)
from common.diagrams.pipeline import (
    draw_loader_prefetch,
    draw_pipeline_stages,
    draw_sampler_split,
    draw_shard_assignment,
    draw_your_data_path,
    prefetch_timeline,
)
from common.diagrams.resume import draw_loader_resume, resume_timeline
from common.diagrams.samples import (
    collate_batch,
    draw_collate_path,
    draw_transform_pipeline,
    transform_steps,
)

#: Every diagram, in the order the chapters meet them.
DIAGRAMS: dict[str, Callable[..., Figure]] = {
    "pipeline_stages": draw_pipeline_stages,
    "transform_pipeline": draw_transform_pipeline,
    "collate_path": draw_collate_path,
    "loader_prefetch": draw_loader_prefetch,
    "sampler_split": draw_sampler_split,
    "shard_assignment": draw_shard_assignment,
    "ring_allreduce": draw_ring_allreduce,
    "ddp_buckets": draw_ddp_buckets,
    "zero_stages": draw_zero_stages,
    "fsdp_unit": draw_fsdp_unit,
    "dcp_reshard": draw_dcp_reshard,
    "loader_resume": draw_loader_resume,
    "elastic_rendezvous": draw_elastic_rendezvous,
    "your_data_path": draw_your_data_path,
}

__all__ = ["CAPTIONS", "DIAGRAMS", "LABELS", "LANGUAGES", "collate_batch", "draw", "labels_for",
           "prefetch_timeline", "render", "render_svg", "resume_timeline", "svg_path",
           "transform_steps", "write_all"] + [f"draw_{name}" for name in DIAGRAMS]

#: The fonts the SVG names: matplotlib's own DejaVu Sans is what the layout was measured with
#: (on every machine the same, so the bytes are), then CJK fonts a reader is likely to have.
SVG_FONTS = ("'DejaVu Sans', 'Noto Sans CJK SC', 'Source Han Sans SC', 'PingFang SC', "
             "'Microsoft YaHei', 'WenQuanYi Micro Hei', sans-serif")

_RC = {"svg.fonttype": "none", "svg.hashsalt": "common.diagrams", "font.family": "sans-serif",
       "font.sans-serif": ["DejaVu Sans"], "hatch.linewidth": 0.6, "path.simplify": False}


def _check(name: str, language: str) -> None:
    if name not in DIAGRAMS:
        raise ValueError(f"no diagram {name!r}; choose one of {sorted(DIAGRAMS)}")
    if language not in LANGUAGES:
        raise ValueError(f"no language {language!r}; choose one of {LANGUAGES}")


def draw(name: str, language: str = "en") -> Figure:
    """A new figure of diagram ``name`` (a key of ``DIAGRAMS``) in ``language``.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    _check(name, language)
    return DIAGRAMS[name](language=language)


def render(name: str, language: str = "en", *, fmt: str = "svg", fonts: tuple[str, ...] = ()
           ) -> bytes:
    """The bytes of diagram ``name`` as ``fmt`` (``"svg"``, or ``"png"`` to look at one).

    ``fonts`` are tried after DejaVu Sans for glyphs it lacks (a CJK font for a PNG preview;
    those not installed are left out); the committed SVGs use none, so their layout does not
    depend on what is installed.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    _check(name, language)
    installed = {entry.name for entry in font_manager.fontManager.ttflist}
    fonts = tuple(font for font in fonts if font in installed)
    rc = {**_RC, "font.family": ["DejaVu Sans", *fonts]} if fonts else _RC
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        # DejaVu Sans has no CJK glyphs; the SVG keeps the characters and the browser draws them.
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        fig = DIAGRAMS[name](language=language)
        buffer = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(buffer, format=fmt, metadata=metadata, dpi=110)
    plt.close(fig)
    data = buffer.getvalue()
    if fmt == "svg":
        data = data.replace(b"font-family: 'DejaVu Sans', sans-serif", b"font-family: "
                            + SVG_FONTS.encode())
    return data


def render_svg(name: str, language: str = "en") -> bytes:
    """The committed SVG of diagram ``name`` in ``language``, byte for byte.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    return render(name, language, fmt="svg")


def svg_path(out: Path, name: str, language: str) -> Path:
    """Where diagram ``name`` goes under ``out``: ``out/name.svg``, ``out/zh/name.svg``.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    return Path(out) / (f"{name}.svg" if language == "en" else f"{language}/{name}.svg")


def write_all(out: Path, *, names: tuple[str, ...] = (), languages: tuple[str, ...] = LANGUAGES
              ) -> list[Path]:
    """Render ``names`` (default: all) in ``languages`` into ``out``; returns the files written.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    written = []
    for name in names or tuple(DIAGRAMS):
        for language in languages:
            path = svg_path(out, name, language)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(render_svg(name, language))
            written.append(path)
    return written
