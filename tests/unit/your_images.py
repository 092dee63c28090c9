"""Tiny real image datasets for the tests of ``common.layouts`` and the trainers on them.

Three classes, images of mixed sizes and modes (L and RGB as JPEG; RGBA and P as PNG, which JPEG
cannot hold), each class its own colour so that a model can tell them apart. Two layouts of the
same images: an ImageFolder root (``train/<class>/``, ``val/<class>/``) and the guide's
annotations CSVs (``train.csv``, ``val.csv`` with an ``images/`` folder).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

CLASSES = ("cat", "dog", "fish")
COLOURS = ((200, 40, 40), (40, 200, 40), (40, 40, 200))
MODES = ("L", "RGBA", "P", "RGB")


def write_image(path: Path, label: int, index: int) -> Path:
    """One image of class ``label``: its mode and size vary with ``index``."""
    mode = MODES[index % len(MODES)]
    image = Image.new("RGB", (24 + 9 * index, 20 + 5 * label), COLOURS[label]).convert(mode)
    path = path.with_suffix(".png" if mode in ("RGBA", "P") else ".jpg")
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path


def write_imagefolder(root: Path, *, train: int = 4, val: int = 2,
                      classes: tuple[str, ...] = CLASSES) -> Path:
    """``root/{train,val}/<class>/img_<i>.{jpg,png}``; returns ``root``."""
    for split, count in (("train", train), ("val", val)):
        for label, name in enumerate(classes):
            for index in range(count):
                write_image(root / split / name / f"img_{index}", label, index)
    return root


def write_csv_layout(root: Path, *, named: bool = True, train: int = 4, val: int = 2) -> Path:
    """``root/images/``, ``root/train.csv`` and ``root/val.csv`` (labels as names or integers)."""
    for split, count in (("train", train), ("val", val)):
        rows = ["file_name,label"]
        for label, name in enumerate(CLASSES):
            for index in range(count):
                path = write_image(root / "images" / split / f"{name}_{index}", label, index)
                rows.append(f"{path.relative_to(root / 'images').as_posix()},"
                            f"{name if named else label}")
        (root / f"{split}.csv").write_text("\n".join(rows) + "\n")
    return root


def csv_flags(root: Path) -> list[str]:
    """The four flags of the guide's layout for ``write_csv_layout(root)``."""
    return ["--train-csv", str(root / "train.csv"), "--train-images", str(root / "images"),
            "--val-csv", str(root / "val.csv"), "--val-images", str(root / "images")]


# ---------------------------------------------------------------- a messy folder, as users have them

#: The messy folder's classes: a Chinese name, and ``café`` whose folder is written in NFD (a Mac).
MESSY_CLASSES = ("café", "dog", "猫")


def _jpeg_with_orientation(path: Path, colour: tuple[int, int, int], turn: int) -> None:
    """A phone photo: stored 40x20 (a bar on its left), shown 20x40 by a viewer (EXIF ``turn``)."""
    image = Image.new("RGB", (40, 20), colour)
    image.paste((255, 255, 255), (0, 0, 8, 20))
    exif = Image.Exif()
    exif[0x0112] = turn
    image.save(path, "JPEG", exif=exif.tobytes())


def write_messy_split(folder: Path, count: int, tag: int = 0) -> list[str]:
    """One split of the messy folder; returns the relative paths of the user's images, sorted as
    the listing sorts them (class, then path)."""
    import unicodedata

    import numpy as np

    expected = []
    for label, name in enumerate(MESSY_CLASSES):
        on_disk = unicodedata.normalize("NFD", name) if name == "café" else name
        base = folder / on_disk
        base.mkdir(parents=True, exist_ok=True)
        colour = tuple(value + tag for value in COLOURS[label])
        files = {}
        for index in range(count):  # mixed sizes and aspect ratios (a 2:1 panorama)
            files[f"img_{index}.jpg"] = ("JPEG", Image.new("RGB", (30 + 20 * index, 30), colour))
        grey = 60 + 40 * label + tag
        files["grey.png"] = ("PNG", Image.new("L", (24, 24), grey))
        files["cmyk.jpg"] = ("JPEG", Image.new("RGB", (24, 32), colour).convert("CMYK"))
        rgba = Image.new("RGBA", (24, 24), colour + (255,))
        rgba.paste((0, 0, 0, 0), (0, 0, 12, 24))  # half transparent: white on every path
        files["rgba.png"] = ("PNG", rgba)
        sixteen = np.full((24, 24), 257 * grey, dtype=np.uint16)  # shown as grey, not white
        files["deep.png"] = ("PNG", Image.fromarray(sixteen))
        files["png_named.jpg"] = ("PNG", Image.new("RGB", (28, 28), colour))  # a PNG called .jpg
        files["no_suffix"] = ("PNG", Image.new("RGB", (26, 26), colour))
        files["photo.jfif"] = ("JPEG", Image.new("RGB", (30, 24), colour))
        for number, (file_name, (fmt, image)) in enumerate(files.items()):
            marker = 100 + 10 * tag + number  # one pixel apart: no two files share their bytes
            image.putpixel((1, 1), marker if image.mode in ("L", "I;16") else
                           (marker,) * len(image.getbands()))
            image.save(base / file_name, fmt)
        _jpeg_with_orientation(base / "phone.jpg", (colour[0], colour[1] + tag, colour[2]), 6)
        expected += [(name, f"{on_disk}/{file_name}") for file_name in [*files, "phone.jpg"]]
        # junk: skipped and counted
        (base / ".ipynb_checkpoints").mkdir(exist_ok=True)
        Image.new("RGB", (8, 8)).save(base / ".ipynb_checkpoints" / "img_0-checkpoint.jpg")
        (base / "@eaDir").mkdir(exist_ok=True)
        Image.new("RGB", (8, 8)).save(base / "@eaDir" / "thumb.jpg")
        (base / "._img_0.jpg").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
        (base / "Thumbs.db").write_bytes(b"\xd0\xcf\x11\xe0")
        (base / "notes.txt").write_text("where these came from\n")  # not an image: named
        (base / "loop").symlink_to(".", target_is_directory=True)  # a symbolic-link loop
    (folder / ".ipynb_checkpoints").mkdir(exist_ok=True)
    (folder / "__MACOSX").mkdir(exist_ok=True)
    (folder / "__MACOSX" / "._x.jpg").write_bytes(b"\x00")
    (folder / "desktop.ini").write_text("[.ShellClassInfo]\n")
    heic = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64
    (folder / "dog" / "IMG_0001.heic").write_bytes(heic)  # skipped, with the reason
    order = {name: label for label, name in enumerate(MESSY_CLASSES)}
    return [path for _, path in sorted(expected, key=lambda item: (order[item[0]], item[1]))]


def write_messy_folder(root: Path, *, train: int = 3, val: int = 1) -> dict[str, list[str]]:
    """``root/train`` and ``root/val``, messy (module doc); the user's images of each split."""
    return {"train": write_messy_split(root / "train", train, 0),
            "val": write_messy_split(root / "val", val, 1)}


def truncated_jpeg(path: Path) -> Path:
    """A JPEG whose header is whole and whose data stops early (a copy cut short)."""
    Image.new("RGB", (64, 64), (90, 120, 30)).save(path, "JPEG")
    data = path.read_bytes()
    path.write_bytes(data[:data.index(b"\xff\xda") + 40])
    return path
