"""The members of a shard and the user's files they come from.

A member is named by its content's format (``MEMBER_EXTENSIONS``), never by the file's suffix:
a PNG saved as ``x.jpg`` is stored as ``<key>.png``, so the reader decodes it with the right
decoder. The manifest lists, per shard, the file each sample was written from
(``"sources"``, relative to ``"sources_root"``): :func:`source_of` finds it for an error.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from common.data import decode_errors, open_image
from common.images.pixels import viewer_rgb

#: A member's extension, from its content's format as Pillow reads it (not from the file name:
#: a PNG saved as ``x.jpg`` is stored as ``<key>.png``); other formats Pillow reads: ``img``.
MEMBER_EXTENSIONS = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp", "BMP": "bmp",
                     "TIFF": "tif", "GIF": "gif", "PPM": "ppm"}


def member_extension(image_path: Path, data: bytes) -> str:
    """The member extension of an image file's bytes, from their format (``MEMBER_EXTENSIONS``),
    after decoding them in full as every reader will (``viewer_rgb``).

    Raises:
        BadSampleError: Naming ``image_path`` (the user's file) when it cannot be decoded.

    Introduced in docs/scripts.md ("Your own images").
    """
    with decode_errors(f"cannot shard {image_path}"):
        with open_image(io.BytesIO(data)) as image:
            fmt = image.format or ""
            viewer_rgb(image)  # a truncated or damaged file is refused now, naming it
    return MEMBER_EXTENSIONS.get(fmt, "img")


def relative_source(path: Path, base: str) -> str:
    """``path`` relative to ``base``, with ``/``: how the manifest names a sample's source.

    Introduced in docs/scripts.md ("Your own images").
    """
    return Path(os.path.relpath(os.path.abspath(path), base)).as_posix()


def source_of(manifest: str | os.PathLike, shard: str, key: str) -> str:
    """The user's file that sample ``key`` of ``shard`` was written from (``""``: not recorded),
    ``<sources_root>/<path>``, from the manifest's ``sources``: for an error about a member.

    Introduced in docs/scripts.md ("Your own images").
    """
    try:
        written = json.loads(Path(manifest).read_text(encoding="utf-8"))
        entry = next(e for e in written["shards"] if e.get("name") == shard)
        before = written["shards"][:written["shards"].index(entry)]
        index = int(key) - sum(e["num_samples"] for e in before)  # keys count from 0 over shards
        return f"{written.get('sources_root', '')}/{entry['sources'][index]}"
    except (OSError, ValueError, KeyError, IndexError, StopIteration, TypeError):
        return ""
