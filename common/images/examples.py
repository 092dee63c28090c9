"""A small messy folder of images, as real ones come: what chapter 7 and the tests run every path on.

:func:`write_messy_folder` writes ``root/train/<class>/`` and ``root/val/<class>/`` for three classes
(``café`` in NFD, as a Mac writes it, ``dog`` and ``猫``), each class its own colour, every file's bytes
different. Per class: JPEGs of mixed sizes and aspect ratios (a 2:1 panorama), a phone photo stored
sideways with an EXIF Orientation tag, grey (L), CMYK, RGBA (half transparent) and 16-bit PNGs, a PNG
saved as ``.jpg``, a file without a suffix, a ``.jfif``; and the junk real folders hold: a
``.ipynb_checkpoints`` folder in each class and beside them, ``@eaDir``, AppleDouble ``._*``,
``Thumbs.db``, ``desktop.ini``, ``__MACOSX``, a text file, a HEIC photo this Pillow cannot decode, a
symbolic-link loop. :func:`truncated_jpeg` adds a copy cut short.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np
from PIL import Image

#: Each class's colour (RGB), by label.
COLOURS = ((200, 40, 40), (40, 200, 40), (40, 40, 200))

#: The classes: a Chinese name, and ``café`` whose folder is written in NFD (a Mac).
MESSY_CLASSES = ("café", "dog", "猫")


def _phone_photo(path: Path, colour: tuple[int, int, int], turn: int) -> None:
    """A phone photo: stored 40x20 (a bar on its left), shown 20x40 by a viewer (EXIF ``turn``)."""
    image = Image.new("RGB", (40, 20), colour)
    image.paste((255, 255, 255), (0, 0, 8, 20))
    exif = Image.Exif()
    exif[0x0112] = turn
    image.save(path, "JPEG", exif=exif.tobytes())


def write_messy_split(folder: Path, count: int, tag: int = 0) -> list[str]:
    """One split of the messy folder in ``folder`` (``tag``: 0 for train, 1 for val, so no two
    files share their bytes); the relative paths of its images, in the listing's order.

    Introduced in chapters/07_your_data.ipynb.
    """
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
        _phone_photo(base / "phone.jpg", (colour[0], colour[1] + tag, colour[2]), 6)
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
    """``root/train`` and ``root/val``, messy (module doc); the images of each split, relative.

    Introduced in chapters/07_your_data.ipynb.
    """
    return {"train": write_messy_split(root / "train", train, 0),
            "val": write_messy_split(root / "val", val, 1)}


def truncated_jpeg(path: Path) -> Path:
    """A JPEG at ``path`` whose header is whole and whose data stops early (a copy cut short).

    Introduced in chapters/07_your_data.ipynb.
    """
    Image.new("RGB", (64, 64), (90, 120, 30)).save(path, "JPEG")
    data = path.read_bytes()
    path.write_bytes(data[:data.index(b"\xff\xda") + 40])
    return path
