"""common.images.layouts: your images in the trainers' layouts, read as they are, refused by name.

Real image files (``tests/unit/your_images.py``: 3 classes, modes L, RGBA, P and RGB, JPEG and
PNG, every size different); the oracle for the ImageFolder layout is torchvision's own listing.
"""

from __future__ import annotations

import io
import os
import shutil
from collections import Counter
from contextlib import redirect_stdout

import pytest
import torch
from PIL import Image
from torch import nn

from common.annotations import BadSampleError
from common.data import CustomImageDataset
from common.ddp.config import parse_config
from common.fast.cache import CacheConfig, ensure_cache
from common.images.layouts import (
    DataLayoutError,
    as_image_data,
    csv_data,
    data_identity,
    file_list,
    folder_data,
    layout_of,
    resolve_data,
)
from common.models import check_input_size, create_model, groupnorm_only, load_weights
from tests.unit.your_images import CLASSES, csv_flags, write_csv_layout, write_imagefolder


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    """An ImageFolder root: 4 training and 2 validation images per class."""
    return write_imagefolder(tmp_path_factory.mktemp("layouts") / "pets")


@pytest.fixture(scope="module")
def guide(tmp_path_factory):
    """The guide's layout: train.csv and val.csv (labels as names) and an images/ folder."""
    return write_csv_layout(tmp_path_factory.mktemp("layouts") / "guide")


def _copy(root, tmp_path):
    return shutil.copytree(root, tmp_path / root.name)


def test_an_imagefolder_root_is_read_as_torchvision_lists_it(pets):
    from torchvision.datasets import ImageFolder

    data = resolve_data(parse_config(["--data", str(pets)]))
    assert (layout_of(pets), data.kind, data.classes) == ("imagefolder", "imagefolder", CLASSES)
    train = data.dataset("train")
    assert train.samples == ImageFolder(str(pets / "train")).samples
    modes = set()
    for path, _ in train.samples:
        with Image.open(path) as image:
            modes.add(image.mode)
    assert modes == {"L", "RGBA", "P", "RGB"}
    image, label = train[1]  # an RGBA PNG, decoded as RGB
    assert (image.mode, label) == ("RGB", 0)


def test_the_guide_s_csvs_number_named_labels_in_sorted_order(guide, tmp_path):
    data = resolve_data(parse_config(csv_flags(guide)))
    assert (data.kind, data.classes, data.named_labels) == ("csv", CLASSES, True)
    val = data.dataset("val")
    assert list(val.labels) == [0, 0, 1, 1, 2, 2]
    integers = csv_data(*(write_csv_layout(tmp_path / "ints", named=False) / name
                          for name in ("train.csv", "images", "val.csv", "images")))
    assert (integers.classes, integers.named_labels) == (("0", "1", "2"), False)
    assert list(integers.dataset("train").labels) == list(data.dataset("train").labels)


def test_the_shapes_folder_is_read_as_before(tiny_data):
    data = resolve_data(parse_config(["--data", str(tiny_data.root)]))
    assert data == as_image_data(tiny_data) and data.cache_root == tiny_data.root.parent / "cache"
    assert isinstance(data.dataset("train"), CustomImageDataset)
    assert "--data train/labels.csv" in data_identity(data)


def test_a_folder_in_no_layout_is_an_argparse_error_saying_what_was_expected(tmp_path, capsys):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "a.jpg").write_bytes(b"")
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--data", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--data" in err and "ImageFolder root" in err
    assert "holds photos/" in err and "--train-csv" in err


@pytest.mark.parametrize("argv, flag", [
    (["--train-csv", "{csv}"], "--val-images"),
    (["--data", "{root}", "--train-csv", "{csv}", "--train-images", "{root}", "--val-csv", "{csv}",
      "--val-images", "{root}"], "--data"),
    (["--model", "resnet1000"], "--model"),
    (["--weights", "{root}/missing.pt"], "--weights")])
def test_bad_data_and_model_flags_are_argparse_errors(guide, argv, flag, capsys):
    argv = [a.format(csv=guide / "train.csv", root=guide) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        parse_config(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"{flag}:" in err
    if flag == "--model":
        assert "resnet18" in err and "mobilenet_v3_small" in err and "small_cnn" in err


def test_one_class_is_refused_naming_the_folder_or_the_csv(tmp_path):
    root = write_imagefolder(tmp_path / "one", classes=("cat",))
    with pytest.raises(DataLayoutError, match=rf"{root / 'train'}: 1 class.*at least 2"):
        folder_data(root)
    guide = write_csv_layout(tmp_path / "g")
    (guide / "train.csv").write_text("file_name,label\ntrain/cat_0.jpg,cat\n")
    with pytest.raises(DataLayoutError, match=r"train.csv: 1 class"):
        csv_data(guide / "train.csv", guide / "images", guide / "val.csv", guide / "images")


def test_an_empty_split_is_refused_naming_it(pets, guide, tmp_path):
    root = _copy(pets, tmp_path)
    shutil.rmtree(root / "val")
    (root / "val").mkdir()
    with pytest.raises(DataLayoutError, match=rf"{root / 'val'} holds no class folders"):
        folder_data(root).dataset("val")
    (root / "val" / "cat").mkdir()  # a class folder without one image
    with pytest.raises(BadSampleError, match=rf"{root / 'val' / 'cat'}: a class folder without one image"):
        folder_data(root).dataset("val")
    empty = tmp_path / "empty.csv"
    empty.write_text("file_name,label\n")
    with pytest.raises(BadSampleError, match=r"empty.csv has a header but no rows"):
        csv_data(guide / "train.csv", guide / "images", empty, guide / "images").dataset("val")


def test_labels_out_of_range_are_refused_naming_the_csv_and_line(tmp_path):
    guide = write_csv_layout(tmp_path / "ints", named=False)
    flags = (guide / "train.csv", guide / "images", guide / "val.csv", guide / "images")
    train = (guide / "train.csv").read_text()
    (guide / "train.csv").write_text(train.replace(",2\n", ",3\n"))  # labels 0, 1, 3
    with pytest.raises(DataLayoutError, match=r"train.csv: integer labels must be 0..K-1.*"
                                              r"no row has \[2\]"):
        csv_data(*flags)
    (guide / "train.csv").write_text(train)
    val = (guide / "val.csv").read_text().splitlines()
    (guide / "val.csv").write_text("\n".join([*val[:-1], val[-1].replace(",2", ",5")]) + "\n")
    with pytest.raises(BadSampleError, match=r"val.csv line 7: .*label 5 is not a known class "
                                             r"\(0..2\)"):
        csv_data(*flags).dataset("val")


def test_validation_classes_the_training_split_lacks_are_refused(pets, guide, tmp_path):
    root = _copy(pets, tmp_path)
    (root / "val" / "fish").rename(root / "val" / "cow")
    with pytest.raises(BadSampleError, match=r"cow: class 'cow' is not a class of the training "
                                             r"split"):
        folder_data(root).dataset("val")
    shutil.rmtree(root / "val" / "cow")  # a split without one class: numbered by train's
    assert sorted(set(folder_data(root).dataset("val").targets)) == [0, 1]
    val = guide / "val.csv"
    copy = tmp_path / "val.csv"
    copy.write_text(val.read_text().replace(",fish", ",cow"))
    with pytest.raises(BadSampleError, match=r"val.csv line 6: .*label 'cow' is not a known"):
        csv_data(guide / "train.csv", guide / "images", copy, guide / "images").dataset("val")


def test_an_unreadable_image_is_named_when_it_is_first_read(pets, tmp_path):
    root = _copy(pets, tmp_path)
    broken = root / "train" / "dog" / "img_0.jpg"
    whole = broken.read_bytes()
    broken.write_bytes(b"not a JPEG")  # no image at all: refused when listed, named
    with pytest.raises(BadSampleError, match=rf"{broken}: not an image .*a damaged file"):
        folder_data(root).dataset("train")
    broken.write_bytes(whole[:whole.index(b"\xff\xda") + 20])  # a header, data cut: refused when decoded
    dataset = folder_data(root).dataset("train")  # listed: not decoded yet
    index = [path for path, _ in dataset.samples].index(str(broken))
    with pytest.raises(BadSampleError, match=rf"cannot decode image {broken}"):
        dataset[index]


def test_the_cache_key_is_the_layout_and_the_file_list(pets, guide, tmp_path, capsys):
    root = _copy(pets, tmp_path)
    source = folder_data(root).dataset("train")
    listed = file_list(source)
    assert listed.extra.startswith(b"imagefolder\n") and b"cat/img_0.jpg\t0" in listed.extra
    ensure_cache(source, tmp_path / "cache", CacheConfig(16, 16))
    (root / "train" / "cat" / "img_0.jpg").rename(root / "train" / "dog" / "img_9.jpg")
    ensure_cache(folder_data(root).dataset("train"), tmp_path / "cache", CacheConfig(16, 16))
    assert "the file list of train/ has changed" in capsys.readouterr().out
    named = file_list(csv_data(guide / "train.csv", guide / "images", guide / "val.csv",
                               guide / "images").dataset("train"))
    assert named.extra == b"\0classes\0cat\ndog\nfish"  # names -> numbers is part of the key


def test_a_torchvision_model_has_the_data_s_classes_and_random_weights():
    torch.manual_seed(0)
    model = create_model("resnet18", 3)
    assert model.fc.out_features == 3
    torch.manual_seed(1)
    assert not torch.equal(model.fc.weight, create_model("resnet18", 3).fc.weight)
    check_input_size(model, 32, name="resnet18")
    assert model.training  # left as it was


def test_a_model_that_cannot_take_the_image_size_is_refused():
    fixed = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 3))
    check_input_size(fixed, 32, name="fixed")
    with pytest.raises(ValueError, match=r"--model fixed cannot take --image-size 16 images"):
        check_input_size(fixed, 16, name="fixed")


def test_weights_load_strictly_and_a_mismatch_names_the_keys(tmp_path):
    source = create_model("small_cnn", 3, width=4)
    torch.save(source.state_dict(), tmp_path / "w.pt")
    target = load_weights(create_model("small_cnn", 3, width=4), tmp_path / "w.pt")
    assert torch.equal(target.classifier.weight, source.classifier.weight)
    with pytest.raises(ValueError, match=r"classifier.weight is \(3, 16\) in the file, "
                                         r"\(4, 16\) here"):
        load_weights(create_model("small_cnn", 4, width=4), tmp_path / "w.pt")
    grouped = groupnorm_only(create_model("small_cnn", 3, width=4), name="small_cnn")
    with pytest.raises(ValueError, match=r"unexpected features.1.num_batches_tracked.*"
                                         r"BatchNorm statistics"):
        load_weights(grouped, tmp_path / "w.pt")


def test_groupnorm_replaces_batchnorm2d_and_refuses_other_batch_norms():
    model = groupnorm_only(create_model("resnet18", 3), name="resnet18")
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    with pytest.raises(ValueError, match=r"--model mlp keeps 1 batch norm.*1 \(BatchNorm1d\)"):
        groupnorm_only(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), name="mlp")


def test_a_subset_of_an_imagefolder_keeps_every_class(pets, tiny_data):
    data = folder_data(pets)
    kept = data.subset(12, 6)
    assert sorted({data.dataset("train").targets[i] for i in kept}) == [0, 1, 2]
    assert list(as_image_data(tiny_data).subset(24, 5)) == [0, 1, 2, 3, 4]  # a CSV: as before
    assert list(data.subset(12, 0)) == list(data.subset(12, 99)) == list(range(12))


def _counting(monkeypatch, module, name: str, calls: Counter) -> None:
    real = getattr(module, name)

    alive = []  # a counted dataset lives until the test ends, so no id is reused for another

    def counted(where, *args, **kwargs):  # a path, or a dataset (one key per object)
        if not isinstance(where, str | os.PathLike):
            alive.append(where)
        calls[os.fspath(where) if isinstance(where, str | os.PathLike) else id(where)] += 1
        return real(where, *args, **kwargs)

    monkeypatch.setattr(module, name, counted)


@pytest.mark.parametrize("layout, pipeline", [("imagefolder", "decode"), ("csv", "decode"),
                                              ("csv", "cache")])
def test_a_run_lists_each_folder_once_and_parses_each_csv_once(pets, guide, tmp_path, monkeypatch,
                                                              layout, pipeline):
    import common.data
    import common.fast.cache
    import common.images.layouts
    from common.ddp import trainer
    from common.ddp.process_group import DistInfo

    root = _copy(pets if layout == "imagefolder" else guide, tmp_path)
    flags = ["--data", str(root)] if layout == "imagefolder" else csv_flags(root)
    parsed, listed, file_lists = Counter(), Counter(), Counter()
    for module in (common.images.layouts, common.data):
        _counting(monkeypatch, module, "read_annotations", parsed)
    _counting(monkeypatch, common.images.layouts, "list_folder", listed)
    _counting(monkeypatch, common.fast.cache, "file_list", file_lists)  # keyed by the dataset
    config = parse_config(["--tiny", *flags, "--data-pipeline", pipeline, "--no-augment",
                           "--max-steps", "1", "--normalize", "dataset"])
    cpu = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"),
                   backend=None, initialized=False)
    with redirect_stdout(io.StringIO()):
        trainer.train(config, cpu)  # resolve, loaders, statistics, identity, one step
    if layout == "imagefolder":
        assert parsed == Counter() and sorted(listed.values()) == [1, 1], listed
    else:
        assert listed == Counter() and sorted(parsed.values()) == [1, 1], parsed
    assert sorted(file_lists.values()) == ([] if pipeline == "decode" else [1, 1]), file_lists
