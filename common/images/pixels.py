"""An opened image as an image viewer shows it, as 8-bit RGB: the one conversion of every path.

:func:`viewer_rgb` is what ``common.data.load_rgb`` (the decode pipeline, the ImageFolder and CSV
layouts), the uint8 cache's decoder and the shards' decoders apply, so each path gives the same
tensor for the same file:

- **EXIF orientation applied** (``orientation="exif"``, the default): a phone photo stored
  sideways with an Orientation tag is turned upright, as every viewer shows it.
  ``orientation="raw"`` keeps the stored pixels (the trainers' ``--orientation raw``).
- **16-bit and floating-point images scaled to 8 bits**, not clipped: 16-bit levels divided by
  257 (65535 -> 255), floats read as 0..1 (times 255, clipped). Pillow's own ``convert`` clips
  a 16-bit PNG to mostly white and a float TIFF to almost black.
- **Transparency composited on white** (``BACKGROUND``), as a browser shows a transparent PNG
  on a white page: RGBA, LA, and palette or grey images with a transparent colour.
- Everything else (L, P, CMYK, YCbCr, 1-bit, ...) is Pillow's ``convert("RGB")``.

:func:`squared` is the trainers' ``--resize crop|squash|pad`` (``RESIZES``), applied on every
path before the resize and centre crop.

:func:`jpeg_warnings` reports what libjpeg says about a damaged JPEG that still decodes (Pillow
decodes it silently): ``python -m common.images.check`` refuses such a file, naming it.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from PIL import Image

#: The colour transparent pixels are composited on (white, as a browser's page).
BACKGROUND = (255, 255, 255)
ORIENTATIONS = ("exif", "raw")
#: How a picture that is not square becomes the trainers' square ``--image-size``:
#: crop: shorter side to the size, the middle cut out (torchvision's Resize + CenterCrop: a 2:1
#: panorama loses half its width); squash: the whole picture, stretched to a square; pad: the
#: whole picture, centred on a black square (letterboxed), then resized.
RESIZES = ("crop", "squash", "pad")
#: The colour ``resize="pad"`` fills with (black, as a video player letterboxes).
PAD_COLOUR = (0, 0, 0)
_ORIENTATION_TAG = 0x0112
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")
_TURNS = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
          4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
          6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
          8: Image.Transpose.ROTATE_90}


def exif_orientation(image: Image.Image) -> int:
    """The EXIF Orientation tag of ``image`` (1 = upright, stored as shown; 2..8 = to turn).

    Introduced in docs/scripts.md ("Your own images").
    """
    try:
        value = image.getexif().get(_ORIENTATION_TAG, 1)
    except (OSError, SyntaxError, ValueError, TypeError):
        return 1  # a damaged EXIF block: the pixels as stored
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def shown_size(image: Image.Image, orientation: str = "exif") -> tuple[int, int]:
    """``(width, height)`` as a viewer shows the image: swapped when EXIF turns it a quarter.

    Introduced in docs/scripts.md ("Your own images").
    """
    width, height = image.size
    if orientation == "exif" and exif_orientation(image) >= 5:
        return height, width
    return width, height


def _eight_bit(image: Image.Image) -> Image.Image:
    if image.mode in _SIXTEEN_BIT or image.mode == "I":
        levels = np.asarray(image, dtype=np.float64)
        scale = 257.0 if image.mode in _SIXTEEN_BIT or levels.max(initial=0) > 255 else 1.0
        return Image.fromarray(np.clip(np.rint(levels / scale), 0, 255).astype(np.uint8), "L")
    if image.mode == "F":
        levels = np.nan_to_num(np.asarray(image, dtype=np.float64))
        return Image.fromarray(np.clip(np.rint(levels * 255.0), 0, 255).astype(np.uint8), "L")
    return image


def viewer_rgb(image: Image.Image, *, orientation: str = "exif", copy: bool = True) -> Image.Image:
    """``image`` (opened by Pillow) decoded as 8-bit RGB the way a viewer shows it (module doc).

    ``copy=False``: an image that is already upright 8-bit RGB is decoded (``load``) and returned
    itself instead of as a copy (Pillow's ``convert("RGB")`` of an RGB image copies every pixel,
    about 35 µs for a 350 px JPEG): for an image just opened from a file and dropped after
    (``common.data.load_rgb``, the shards' decoder), not for one the caller keeps using.

    Raises:
        ValueError: For an ``orientation`` other than ``"exif"`` or ``"raw"``.

    Introduced in docs/scripts.md ("Your own images").
    """
    if orientation not in ORIENTATIONS:
        raise ValueError(f"orientation must be one of {ORIENTATIONS}, got {orientation!r}")
    turn = exif_orientation(image) if orientation == "exif" else 1
    image = _eight_bit(image)
    if image.mode == "P" and "transparency" in image.info or image.mode in ("PA", "La"):
        image = image.convert("RGBA")
    elif image.mode in ("L", "RGB") and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "RGBa"):
        background = Image.new("RGBA", image.size, BACKGROUND + (255,))
        image = Image.alpha_composite(background, image.convert("RGBA"))
    if copy or image.mode != "RGB":
        image = image.convert("RGB")  # convert() forces the full decode
    else:
        image.load()  # the full decode, now: a damaged file is refused here, not later
    if turn != 1:
        image = image.transpose(_TURNS[turn])  # what ImageOps.exif_transpose does, tag by tag
    return image


def squared(image: Image.Image, resize: str = "crop") -> Image.Image:
    """``image`` made square as ``resize`` says (``RESIZES``), before the trainers' resize and
    centre crop (which then keep it whole); ``"crop"`` leaves it as it is.

    Introduced in docs/scripts.md ("Your own images").
    """
    if resize not in RESIZES:
        raise ValueError(f"resize must be one of {RESIZES}, got {resize!r}")
    width, height = image.size
    if resize == "crop" or width == height:
        return image
    if resize == "squash":
        side = min(width, height)
        return image.resize((side, side), Image.Resampling.BILINEAR)
    side = max(width, height)
    canvas = Image.new("RGB", (side, side), PAD_COLOUR)
    canvas.paste(image, ((side - width) // 2, (side - height) // 2))
    return canvas


def jpeg_warnings(data: bytes) -> str:
    """What libjpeg writes to stderr while decoding the JPEG ``data`` (``""``: nothing).

    Pillow decodes a JPEG whose middle is damaged without a word; ``torchvision.io``'s
    libjpeg-turbo prints ``Corrupt JPEG data: ...`` to the process's stderr (file descriptor
    2), which this captures. For the check of a folder, not for every sample of an epoch.

    Introduced in docs/scripts.md ("Your own images").
    """
    import warnings

    import torch
    from torchvision.io import decode_jpeg  # ~1.5 s: the check only

    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        try:
            os.dup2(capture.fileno(), 2)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                try:
                    decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
                except RuntimeError as error:
                    os.write(2, str(error).encode() + b"\n")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        said = capture.read().decode("utf-8", "replace")
    return " ".join(line.strip() for line in said.splitlines() if line.strip())
