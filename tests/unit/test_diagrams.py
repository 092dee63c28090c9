"""common.diagrams: every diagram draws in both languages, the committed SVGs are what the code draws
today, each diagram sits in the notebook that teaches its concept, and the CLI refuses bad values."""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import nbformat
import pytest

from common import diagrams
from common.diagrams import (
    CAPTIONS,
    DIAGRAMS,
    LABELS,
    LANGUAGES,
    collate_batch,
    prefetch_timeline,
    render_svg,
    resume_timeline,
    transform_steps,
)
from common.diagrams.__main__ import main

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = REPO / "chapters"
FIGURES = CHAPTERS / "figures"
CASES = [(name, language) for name in DIAGRAMS for language in LANGUAGES]

#: Where each diagram is shown: the English notebook whose markdown embeds it (the Chinese
#: notebook of the same name embeds figures/zh/).
PLACEMENTS = {
    "pipeline_stages": "02_1_dataset_dataloader.ipynb",
    "transform_pipeline": "02_2_transforms_augmentation.ipynb",
    "collate_path": "02_3_custom_datasets.ipynb",
    "loader_prefetch": "03_1_efficient_pipelines.ipynb",
    "sampler_split": "04_2_ddp_training.ipynb",
    "shard_assignment": "05_sharded_datasets.ipynb",
    "ring_allreduce": "04_1_ddp_fundamentals.ipynb",
    "ddp_buckets": "04_1_ddp_fundamentals.ipynb",
    "zero_stages": "06_1_fsdp_sharding.ipynb",
    "fsdp_unit": "06_1_fsdp_sharding.ipynb",
    "dcp_reshard": "06_2_distributed_checkpoints.ipynb",
    "loader_resume": "06_3_compile_and_resumable_loaders.ipynb",
    "elastic_rendezvous": "06_4_elastic_training.ipynb",
    "your_data_path": "07_your_data.ipynb",
}
#: Placements not made yet (those notebooks were being edited elsewhere); remove a name once its
#: notebook shows it, and the test below holds it there.
PENDING: set[str] = set()


def _link(name: str, language: str) -> str:
    return f"figures/{name}.svg" if language == "en" else f"../figures/zh/{name}.svg"


def _svg_texts(svg: bytes) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg.decode("utf-8"))


@pytest.mark.parametrize(("name", "language"), CASES)
def test_every_diagram_draws_all_its_words_in_both_languages(name, language):
    svg = render_svg(name, language)
    drawn = "\n".join(_svg_texts(svg))
    for key, words in LABELS[language][name].items():
        fixed = [part for part in re.split(r"\{[^}]*\}|\n", words) if part.strip()]
        for part in fixed:
            assert escape(part.strip(), quote=False) in drawn, f"{name}/{language}: {key!r} not drawn"
    if language == "zh":
        assert re.search(r"[\u4e00-\u9fff]", drawn)


@pytest.mark.parametrize(("name", "language"), CASES)
def test_committed_svgs_are_what_the_code_draws_today(name, language):
    path = diagrams.svg_path(FIGURES, name, language)
    assert path.is_file(), f"{path} missing: run python -m common.diagrams --out chapters/figures"
    committed = path.read_bytes()
    made_by = re.search(rb"<dc:title>Matplotlib v([^,<]+)", committed)
    fresh = render_svg(name, language)
    if made_by and made_by.group(1).decode() != matplotlib.__version__:
        # Another matplotlib writes other bytes for the same picture: hold the words instead.
        assert _svg_texts(committed) == _svg_texts(fresh), f"{path}: re-render it"
        return
    assert committed == fresh, f"{path} is stale: run python -m common.diagrams --out chapters/figures"


def test_the_figures_folder_holds_exactly_the_diagrams():
    expected = {diagrams.svg_path(FIGURES, n, lang) for n, lang in CASES}
    assert set(FIGURES.rglob("*.svg")) == expected


def test_svgs_keep_text_as_text_without_dates_and_name_cjk_fonts():
    svg = render_svg("pipeline_stages", "zh").decode("utf-8")
    assert "<text" in svg and "<dc:date>" not in svg and "PingFang SC" in svg
    assert "整理函数" in svg and "读取" in svg
    assert render_svg("pipeline_stages", "zh") == render_svg("pipeline_stages", "zh")


def _markdown(notebook: Path) -> list[str]:
    nb = nbformat.read(notebook, as_version=4)
    return [cell.source for cell in nb.cells if cell.cell_type == "markdown"]


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
def test_each_diagram_is_shown_with_its_caption_where_its_concept_is_taught(name):
    assert set(PLACEMENTS) == set(DIAGRAMS) and PENDING <= set(DIAGRAMS)
    for language, folder in (("en", CHAPTERS), ("zh", CHAPTERS / "zh")):
        cells = [c for c in _markdown(folder / PLACEMENTS[name]) if f"]({_link(name, language)})" in c]
        if name in PENDING:
            assert not cells, f"{name} is shown in {PLACEMENTS[name]}: remove it from PENDING"
            continue
        assert cells, f"{folder.name}/{PLACEMENTS[name]} has no ![...]({_link(name, language)})"
        assert CAPTIONS[language][name] in cells[0], f"{name}/{language}: caption differs"
        assert (folder / _link(name, language)).is_file()


def test_every_image_link_in_the_notebooks_resolves():
    for folder in (CHAPTERS, CHAPTERS / "zh"):
        for notebook in sorted(folder.glob("*.ipynb")):
            for source in _markdown(notebook):
                for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", source):
                    if not re.match(r"[a-z]+:", target):
                        assert (folder / target).is_file(), f"{notebook.name}: {target}"


def test_a_notebook_can_draw_a_diagram_into_its_own_axes():
    fig, ax = plt.subplots(figsize=(8, 3))
    assert diagrams.draw_ring_allreduce(ax, language="zh") is fig
    assert any("归约散射" in t.get_text() for t in ax.texts)
    plt.close(fig)


def test_unknown_names_and_languages_are_refused():
    with pytest.raises(ValueError, match="no diagram 'nope'"):
        diagrams.draw("nope")
    with pytest.raises(ValueError, match="no language 'fr'"):
        diagrams.render_svg("ring_allreduce", "fr")
    with pytest.raises(ValueError, match="no labels for language 'fr'"):
        diagrams.draw_zero_stages(language="fr")


def test_english_text_stays_inside_the_picture_and_never_overlaps():
    for name in DIAGRAMS:
        fig = diagrams.draw(name)
        renderer = fig.canvas.get_renderer()
        page = fig.bbox
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in fig.axes[0].texts
                 if t.get_text().strip()]
        for words, extent in boxes:
            assert page.x0 - 1 <= extent.x0 and extent.x1 <= page.x1 + 1, f"{name}: {words!r}"
            assert page.y0 - 1 <= extent.y0 and extent.y1 <= page.y1 + 1, f"{name}: {words!r}"
        for i, (a, ea) in enumerate(boxes):
            for b, eb in boxes[i + 1:]:
                assert not ea.shrunk(0.97, 0.9).overlaps(eb.shrunk(0.97, 0.9)), \
                    f"{name}: {a!r} overlaps {b!r}"
        plt.close(fig)


def test_prefetch_timeline_follows_the_dataloaders_dispatch_rule():
    loads, steps = prefetch_timeline(num_workers=2, prefetch_factor=2, num_batches=9,
                                     load=0.8, step=0.75)
    for b, (worker, start, end) in enumerate(loads):
        assert worker == b % 2 and end > start
        taken = sum(1 for _, begin, _ in steps if begin <= start + 1e-9)
        assert b - taken < 4, f"batch {b} started with {b - taken} batches already in flight"
    assert all(ready <= begin for ready, begin, _ in steps)
    waits = [b for b, (ready, begin, _) in enumerate(steps) if b and begin - steps[b - 1][2] > 1e-9]
    assert waits == []  # two workers at 0.8 per batch outrun a 0.75 step: only batch 0 is awaited
    assert steps[0][1] == pytest.approx(0.8)
    slow, _ = prefetch_timeline(num_workers=1, prefetch_factor=1, num_batches=3, load=1.0, step=0.5)
    assert [start for _, start, _ in slow] == [0.0, 1.0, 2.0]


def test_transform_steps_find_the_random_steps_and_each_output():
    import torch
    from torchvision.transforms import v2

    from common.diagrams.samples import sample_image
    from common.transforms import V2EvalPreset, V2TrainPreset

    image = sample_image(96, 80)
    train = transform_steps(V2TrainPreset(crop_size=64).pipeline.transforms, image)
    assert [(s.name, s.random) for s in train] == [
        ("ToImage", False), ("RandomResizedCrop", True), ("RandomHorizontalFlip", True),
        ("RandomRotation", True), ("ColorJitter", True), ("ToDtype", False), ("Normalize", False)]
    assert [(s.kind, s.shape) for s in train[:2]] == [("uint8", "3×80×96"), ("uint8", "3×64×64")]
    assert (train[-1].kind, train[-1].shape) == ("float32", "3×64×64")
    evaluation = transform_steps(V2EvalPreset(resize_size=72, crop_size=64).pipeline.transforms,
                                 image)
    assert not any(s.random for s in evaluation) and evaluation[1].shape == "3×72×86"
    state = torch.random.get_rng_state()
    transform_steps([v2.RandomHorizontalFlip()], image)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's RNG is left alone
    assert transform_steps([v2.RandomHorizontalFlip(p=0.0)], image)[0].random is False


def test_collate_batch_is_what_padcollate_and_the_balanced_sampler_make():
    rows = (("a.jpg", 1, (5, 7)), ("b.jpg", 0, (6, 3)), ("c.jpg", 1, (2, 2)))
    images, labels, sizes, weights = collate_batch(rows)
    assert images.shape == (3, 3, 6, 7) and labels.tolist() == [1, 0, 1]
    assert sizes.tolist() == [[5, 7], [6, 3], [2, 2]] and weights == [0.5, 1.0, 0.5]
    assert images[0, :, 5:].abs().sum() == 0 and images[1, :, :, 3:].abs().sum() == 0


def test_resume_timeline_continues_where_the_stateful_loader_stopped():
    run = resume_timeline(num_samples=20, batch_size=4, stop_after=2, seed=1)
    assert len(run.full) == 5 and sorted(sum(run.full, [])) == list(range(20))
    assert run.resumed == [3, 4, 5]  # the same batches the uninterrupted epoch had next
    assert run.restarted == [1, 2, 3, 4, 5]  # a plain DataLoader starts the epoch over
    assert (run.batches_yielded, run.samples_yielded) == (2, 8) and run.generator_bytes > 0
    drawn = _svg_texts(render_svg("loader_resume", "en"))
    assert "b4" in drawn and "_num_yielded = 3: batches already yielded" in drawn


def test_zero_stages_print_the_bytes_of_common_fsdp():
    drawn = _svg_texts(render_svg("zero_stages", "en"))
    assert [t for t in drawn if "bytes" in t] == [f"{b} bytes / parameter" for b in (16, 10, 7, 4)]


def test_cli_writes_both_languages_and_refuses_bad_values(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--only", "zero_stages", "ring_allreduce"]) == 0
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.svg")) == [
        "ring_allreduce.svg", "zero_stages.svg", "zh/ring_allreduce.svg", "zh/zero_stages.svg"]
    assert (tmp_path / "zh/zero_stages.svg").read_bytes() == render_svg("zero_stages", "zh")
    assert main(["--out", str(tmp_path / "png"), "--only", "fsdp_unit", "--language", "en",
                 "--png"]) == 0
    assert (tmp_path / "png/fsdp_unit.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    for bad in (["--only", "nope"], ["--language", "fr"], ["--out"], ["--colour", "red"]):
        with pytest.raises(SystemExit) as stop:
            main(["--out", str(tmp_path), *bad] if bad[0] != "--out" else bad)
        assert stop.value.code == 2, bad
        assert "error:" in capsys.readouterr().err
