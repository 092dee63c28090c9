"""The synthetic dataset: layout, determinism, idempotence, damage detection."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from common.shapes import CLASSES, draw_shape_image
from common.synthetic import SyntheticConfig, ensure_data, generate, verify
from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[1]


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


@pytest.mark.parametrize("damage", ["delete", "corrupt", "extra", "manifest"])
def test_damage_is_detected_and_repaired(tmp_path, damage):
    root = tmp_path / "shapes"
    ensure_data(root, TINY, verbose=False)
    reference = _tree_hashes(root)
    target = root / "train" / "images" / "img_00003.jpg"
    if damage == "delete":
        target.unlink()
    elif damage == "corrupt":
        target.write_bytes(target.read_bytes()[:100])
    elif damage == "extra":
        (root / "train" / "images" / "stray.jpg").write_bytes(b"not an image")
    else:
        (root / "manifest.json").write_text("{ truncated")
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


def test_cli_writes_a_dataset(tmp_path):
    root = tmp_path / "cli"
    result = subprocess.run(
        [sys.executable, str(REPO / "data_scripts" / "make_synthetic_data.py"), "--root", str(root),
         "--num-train", "12", "--num-val", "6", "--min-size", "32", "--max-size", "48"],
        capture_output=True, text=True, check=True)
    assert "12 train + 6 val" in result.stdout
    assert len(list((root / "train" / "images").glob("*.jpg"))) == 12
