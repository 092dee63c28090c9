"""The synthetic dataset: layout, determinism, idempotence, damage detection."""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from common.shapes import CLASSES, draw_shape_image
from common.synthetic import SyntheticConfig, ensure_data, generate, verify
from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[2]


def _tree_hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout_matches_the_guide(tiny_data):
    frame = pd.read_csv(tiny_data.labels_csv("train"))
    assert list(frame.columns) == ["file_name", "label"]
    assert len(frame) == TINY.num_train
    assert all((tiny_data.images_dir("train") / name).is_file() for name in frame.file_name)
    assert sorted(frame.label.unique()) == list(range(len(CLASSES)))
    assert len(pd.read_csv(tiny_data.labels_csv("val"))) == TINY.num_val


def test_imagefolder_copy_has_the_same_bytes_and_labels(tiny_data):
    frame = pd.read_csv(tiny_data.labels_csv("val"))
    for name, label in frame.itertuples(index=False):
        flat = tiny_data.images_dir("val") / name
        nested = tiny_data.imagefolder_dir("val") / CLASSES[label] / name
        assert flat.read_bytes() == nested.read_bytes()


def test_images_have_varied_sizes_within_bounds(tiny_data):
    sizes = {Image.open(p).size for p in tiny_data.images_dir("train").glob("*.jpg")}
    assert len(sizes) > 5
    assert all(TINY.min_size <= side <= TINY.max_size for size in sizes for side in size)


def test_generation_is_deterministic(tmp_path):
    first = generate(tmp_path / "a", TINY)
    second = generate(tmp_path / "b", TINY)
    assert _tree_hashes(first.root) == _tree_hashes(second.root)


def test_a_different_seed_gives_different_images(tmp_path):
    first = generate(tmp_path / "a", TINY)
    other = generate(tmp_path / "b", SyntheticConfig(**{**TINY.__dict__, "seed": TINY.seed + 1}))
    name = "train/images/img_00000.jpg"
    assert (first.root / name).read_bytes() != (other.root / name).read_bytes()


def test_ensure_data_is_idempotent(tmp_path):
    root = tmp_path / "shapes"
    ensure_data(root, TINY, verbose=False)
    stamp = (root / "manifest.json").stat().st_mtime_ns
    ensure_data(root, TINY, verbose=False)
    assert (root / "manifest.json").stat().st_mtime_ns == stamp


@pytest.mark.parametrize("damage", ["delete", "corrupt", "manifest", "empty_list", "files_list"])
def test_damage_is_detected_and_repaired(tmp_path, damage):
    root = tmp_path / "shapes"
    ensure_data(root, TINY, verbose=False)
    reference = _tree_hashes(root)
    target = root / "train" / "images" / "img_00003.jpg"
    if damage == "delete":
        target.unlink()
    elif damage == "corrupt":
        target.write_bytes(target.read_bytes()[:100])
    elif damage == "manifest":
        (root / "manifest.json").write_text("{ truncated")
    elif damage == "empty_list":
        (root / "manifest.json").write_text("[]")
    else:
        manifest = json.loads((root / "manifest.json").read_text())
        (root / "manifest.json").write_text(json.dumps({**manifest, "files": ["classes.txt"]}))
    assert verify(root, TINY), "the damage went unnoticed"
    ensure_data(root, TINY, verbose=False)
    assert verify(root, TINY) == []
    assert _tree_hashes(root) == reference


def test_a_changed_config_triggers_regeneration(tmp_path):
    root = tmp_path / "shapes"
    ensure_data(root, TINY, verbose=False)
    bigger = SyntheticConfig(**{**TINY.__dict__, "num_val": TINY.num_val + 6})
    assert verify(root, bigger)
    ensure_data(root, bigger, verbose=False)
    assert len(pd.read_csv(root / "val" / "labels.csv")) == TINY.num_val + 6
    assert json.loads((root / "manifest.json").read_text())["config"]["num_val"] == 18


@pytest.mark.parametrize("label", range(len(CLASSES)))
def test_each_class_is_drawn_in_a_contrasting_colour(label):
    image = np.asarray(draw_shape_image(label, np.random.default_rng(label), min_size=96,
                                        max_size=96)).astype(float)
    assert image.shape == (96, 96, 3)
    border = np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]])
    centre_spread = np.abs(image - np.median(border, axis=0)).sum(axis=2)
    assert (centre_spread > 100).mean() > 0.03, "the shape is missing or invisible"


def test_unknown_label_is_refused():
    with pytest.raises(ValueError, match="out of range"):
        draw_shape_image(len(CLASSES), np.random.default_rng(0))


def test_a_stray_file_is_warned_about_and_left_alone(tmp_path):
    root = tmp_path / "shapes"
    ensure_data(root, TINY, verbose=False)
    stray = root / "train" / "images" / "notes.txt"
    stray.write_text("mine")
    stamp = (root / "manifest.json").stat().st_mtime_ns
    with pytest.warns(UserWarning, match=r"1 file\(s\) not written by the generator, left alone: "
                                         r".*notes\.txt"):
        ensure_data(root, TINY, verbose=False)
    assert stray.read_text() == "mine"
    assert (root / "manifest.json").stat().st_mtime_ns == stamp  # no regeneration
    assert verify(root, TINY) == [f"{stray} is not in the manifest"]
    generate(root, TINY)  # a regeneration (e.g. --force) carries it over too
    assert stray.read_text() == "mine"


def test_a_trainer_s_cache_of_the_imagefolder_view_is_no_stray(tmp_path):
    from common.images.layouts import folder_data

    root = tmp_path / "shapes"
    ensure_data(root, TINY, verbose=False)
    cache = folder_data(root / "imagefolder").cache_root  # where the trainers keep its caches
    assert cache.parent == root / "cache"
    assert (cache / "known_images_train.json").is_file()  # folder_data's record of the images
    (cache / "statistics_32.json").parent.mkdir(parents=True, exist_ok=True)
    (cache / "statistics_32.json").write_text("{}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ensure_data(root, TINY, verbose=False)
    assert verify(root, TINY) == []
    (root / "cache.txt").write_text("mine")  # only the folder itself is the trainers'
    assert verify(root, TINY) == [f"{root / 'cache.txt'} is not in the manifest"]


def test_a_symlinked_data_folder_is_repaired_through_the_link(tmp_path):
    real = generate(tmp_path / "elsewhere" / "shapes_real", TINY).root
    reference = _tree_hashes(real)
    link = tmp_path / "data" / "shapes"
    link.parent.mkdir()
    link.symlink_to(real, target_is_directory=True)
    (link / "train" / "images" / "img_00003.jpg").write_bytes(b"damaged")
    ensure_data(link, TINY, verbose=False)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert verify(link, TINY) == [] and _tree_hashes(real) == reference
    assert sorted(p.name for p in link.parent.iterdir()) == ["shapes"]
    assert sorted(p.name for p in real.parent.iterdir()) == [".shapes_real.lock", "shapes_real"]


def test_two_forced_regenerations_at_once_serialize(tmp_path):
    root = tmp_path / "shapes"
    generate(root, TINY)
    reference = _tree_hashes(root)
    errors = []

    def force():
        try:
            generate(root, TINY)
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=force) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and _tree_hashes(root) == reference
    assert not (tmp_path / "shapes.tmp").exists()


def test_readers_never_see_a_half_written_dataset(tmp_path):
    root = tmp_path / "shapes"
    generate(root, TINY)
    names = pd.read_csv(root / "train" / "labels.csv").file_name.tolist()
    done, failures, reads = threading.Event(), [], [0]

    def regenerate():
        for _ in range(4):
            generate(root, TINY)
        done.set()

    writer = threading.Thread(target=regenerate)
    writer.start()
    while not done.is_set():
        for name in ["../labels.csv", *names[:6]]:
            try:
                data = (root / "train" / "images" / name).read_bytes()
                failures += [name] if not data else []
            except OSError as error:
                failures.append(f"{name}: {error}")
            reads[0] += 1
    writer.join()
    assert reads[0] > 0 and failures == []
