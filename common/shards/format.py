"""The tar shard format (WebDataset convention): writer, manifest and a safe streaming reader.

A shard is a plain tar file holding, per sample, ``<key>.<format>`` (the original image bytes,
never re-encoded, named by their content's format: ``jpg``, ``png``, ``webp``, ``bmp``, ``tif``,
``gif``) and ``<key>.cls`` (the integer label as ASCII text), members of one sample adjacent.
Every image is decoded once when it is written, so a file no reader could decode stops the
writer naming the user's file; the manifest records each sample's source file. ``manifest.json`` next to the shards lists every shard with its sample
count and sha256, so each rank can plan its epoch without reading any shard. Reading
streams members forward without extracting anything and refuses unsafe or broken ones.
``common.shards`` builds the streaming ``ShardedImageDataset`` on top of this.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import re
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from PIL import Image

from common.data import BadSampleError, decode_errors, open_image
from common.digests import file_sha256
from common.images.pixels import viewer_rgb
from common.shards.members import MEMBER_EXTENSIONS, member_extension, relative_source

MANIFEST_NAME = "manifest.json"
IMAGE_EXTENSIONS = {".jpg": "jpg", ".jpeg": "jpg", ".png": "png", ".webp": "webp", ".bmp": "bmp",
                    ".tif": "tif", ".tiff": "tif", ".gif": "gif", ".ppm": "ppm"}
#: The most bytes one member may claim; checked on the header, before anything is read.
#: Raise it (``common.shards.format.MAX_MEMBER_BYTES = ...``, or ``read_shard(...,
#: max_member_bytes=...)``) for images larger than 64 MiB.
MAX_MEMBER_BYTES = 64 * 2**20
_IMAGE_MEMBERS = {*IMAGE_EXTENSIONS.values(), *MEMBER_EXTENSIONS.values(), "img"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_INT64_MAX = 2**63 - 1


class ShardError(BadSampleError):
    """A shard (or one of its members) is missing, corrupt, unsafe or disagrees with the manifest.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """


@dataclass(frozen=True)
class ShardInfo:
    """One shard file: its path, how many samples it holds, its sha256 (if known) and the
    number of classes its labels must lie below (if known; a manifest's ``classes``).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    path: Path
    num_samples: int
    sha256: str | None = None
    num_classes: int | None = None


# ---------------------------------------------------------------- writing


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    # Fixed metadata so the same input gives byte-identical shards on any machine.
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.type = size, 0, 0o644, tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_one(path: Path, samples: Sequence[tuple[str, Path, int]], source) -> None:
    partial = path.with_suffix(".tar.partial")
    with tarfile.open(partial, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, image_path, label in samples:
            try:
                image = image_path.read_bytes()
            except OSError as error:
                raise BadSampleError(f"cannot shard {image_path}: {error.strerror}") from error
            extension = member_extension(image_path, image)
            for name, data in ((f"{key}.{extension}", image),
                               (f"{key}.cls", str(int(label)).encode("ascii"))):
                tar.addfile(_tarinfo(name, len(data)), io.BytesIO(data))
                source.update(data)
    partial.replace(path)  # a crash never leaves a half-written shard under the real name


def write_shards(samples: Sequence[tuple[str | os.PathLike, int]], out_dir: str | os.PathLike,
                 *, shard_size: int, prefix: str = "shard",
                 classes: Sequence[str] | None = None) -> Path:
    """Pack ``(image_path, label)`` pairs, in order, into tar shards plus ``manifest.json``.

    Sample ``i`` gets the key ``f"{i:08d}"``; every shard holds ``shard_size`` samples
    except possibly the last. Output is deterministic: same input, same bytes.

    Args:
        samples: Image files and integer labels (e.g. ``CustomImageDataset`` paths/labels).
        out_dir: Folder for ``<prefix>-000000.tar ...`` and the manifest (created).
        shard_size: Samples per shard.
        prefix: Shard file name prefix.
        classes: Class names stored in the manifest.

    Returns:
        The manifest path.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    if not samples:
        raise ValueError("no samples to shard")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    keyed = [(f"{i:08d}", Path(p), int(label)) for i, (p, label) in enumerate(samples)]
    base = os.path.commonpath([os.path.abspath(path.parent) for _, path, _ in keyed])
    entries, source = [], hashlib.sha256()
    for start in range(0, len(keyed), shard_size):
        path = out / f"{prefix}-{start // shard_size:06d}.tar"
        chunk = keyed[start:start + shard_size]
        _write_one(path, chunk, source)
        entries.append({"name": path.name, "num_samples": len(chunk),
                        "num_bytes": path.stat().st_size, "sha256": file_sha256(path),
                        "sources": [relative_source(image_path, base) for _, image_path, _ in chunk]})
    manifest = {"format": "webdataset-tar", "version": 1, "shard_size": shard_size,
                "num_samples": len(keyed), "classes": list(classes or []), "shards": entries,
                "sources_root": Path(base).name,  # each shard's "sources": its samples' files
                "source_sha256": source.hexdigest()}  # of all image and label bytes, in order
    manifest_path = out / MANIFEST_NAME
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest_path


# ---------------------------------------------------------------- manifest


def read_manifest(path: str | os.PathLike) -> list[ShardInfo]:
    """The shards a manifest lists (``path`` is the JSON file or its folder), checked for sanity.

    Every entry needs a plain file ``name``, a positive ``num_samples`` and a ``sha256``;
    no name and no sha256 may appear twice (the same shard listed twice, or copied under
    another name, would yield its samples twice); the counts must add up to the
    manifest's ``num_samples``. Labels are later checked against ``classes`` if it is given.

    Raises:
        ShardError: Naming the manifest and the entry.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    path = Path(path)
    path = path / MANIFEST_NAME if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"shard manifest {path} does not exist (run "
                                "data_scripts/make_shards.py)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        entries = manifest["shards"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        raise ShardError(f"{path}: not a shard manifest ({error!r})") from error
    if not isinstance(entries, list):
        raise ShardError(f"{path}: 'shards' must be a list of entries, got "
                         f"{type(entries).__name__} {entries!r:.60}")
    classes = manifest.get("classes") or []
    if not isinstance(classes, list):
        raise ShardError(f"{path}: 'classes' must be a list of names, got {classes!r:.60}")
    shards, names, digests = [], {}, {}
    for i, entry in enumerate(entries):
        shards.append(_manifest_entry(path, i, entry, names, digests, len(classes) or None))
    if not shards:
        raise ShardError(f"{path}: lists no shards")
    total = manifest.get("num_samples")
    if total is not None and total != sum(shard.num_samples for shard in shards):
        raise ShardError(f"{path}: num_samples is {total!r} but the shards' counts add up to "
                         f"{sum(shard.num_samples for shard in shards)}")
    return shards


def _manifest_entry(path: Path, i: int, entry: object, names: dict, digests: dict,
                    num_classes: int | None) -> ShardInfo:
    where = f"{path}: shard entry {i}"
    if not isinstance(entry, dict):
        raise ShardError(f"{where} must be an object with name, num_samples, sha256; got "
                         f"{entry!r:.60}")
    name, count, digest = entry.get("name", ""), entry.get("num_samples"), entry.get("sha256")
    if not isinstance(name, str) or PurePosixPath(name).name != name or name in ("", ".", ".."):
        raise ShardError(f"{where}: name {name!r} must be a plain file name")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ShardError(f"{where} ({name}) has num_samples {count!r}")
    if not isinstance(digest, str) or not _SHA256.match(digest):
        raise ShardError(f"{where} ({name}) has no valid sha256 ({digest!r:.70}); every shard "
                         "needs one (rewrite the manifest with data_scripts/make_shards.py)")
    if name in names:
        raise ShardError(f"{where}: {name} is listed twice (entries {names[name]} and {i})")
    if digest in digests:
        raise ShardError(f"{where}: {name} has the same sha256 as entry {digests[digest][0]} "
                         f"({digests[digest][1]}): the same shard under two names")
    names[name], digests[digest] = i, (i, name)
    return ShardInfo(path.parent / name, count, digest, num_classes)


def verify_shards(shards: Iterable[ShardInfo]) -> None:
    """Check that every shard exists and matches its manifest sha256.

    Raises:
        ShardError: Naming the first missing shard or checksum mismatch.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    for shard in shards:
        if not shard.path.is_file():
            raise ShardError(f"shard {shard.path} is missing")
        if shard.sha256 is not None and file_sha256(shard.path) != shard.sha256:
            raise ShardError(f"shard {shard.path}: sha256 mismatch (manifest "
                             f"{shard.sha256[:12]}..., file {file_sha256(shard.path)[:12]}...); "
                             "the file is corrupt or was changed after the manifest was written")


def ensure_shards(samples: Sequence[tuple[str | os.PathLike, int]], out_dir: str | os.PathLike,
                  *, shard_size: int, prefix: str = "shard",
                  classes: Sequence[str] | None = None) -> Path:
    """``write_shards`` unless ``out_dir`` already holds verified shards of the same samples.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    manifest = Path(out_dir) / MANIFEST_NAME
    try:
        shards = read_manifest(manifest) if manifest.is_file() else None
    except ShardError:
        shards = None  # a damaged manifest: rewrite every shard
    if shards is not None:
        source = hashlib.sha256()
        for image_path, label in samples:
            source.update(Path(image_path).read_bytes() + str(int(label)).encode("ascii"))
        written = json.loads(manifest.read_text())
        if written.get("source_sha256") == source.hexdigest() and \
                written.get("shard_size") == shard_size:
            try:
                verify_shards(shards)
                return manifest
            except ShardError:
                pass  # damaged: fall through and rewrite every shard
    return write_shards(samples, out_dir, shard_size=shard_size, prefix=prefix, classes=classes)


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class ShardRecord:
    """One undecoded sample as read from a shard (image bytes stay encoded until needed).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """

    shard: str
    key: str
    member: str
    data: bytes
    label: int


def _check_member(shard: Path, member: tarfile.TarInfo) -> tuple[str, str]:
    # Nothing is ever extracted to disk, but a '../' or absolute name means a hostile or
    # broken shard, and its key could collide with a real one: refuse it.
    where = f"shard {shard}: member {member.name!r}"
    if not member.isreg():
        raise ShardError(f"{where} is not a regular file (links, folders and devices are refused)")
    posix = PurePosixPath(member.name)
    if posix.is_absolute() or ".." in posix.parts or "\\" in member.name:
        raise ShardError(f"{where} has an unsafe path (absolute or '..')")
    stem, dot, extension = posix.name.partition(".")
    if not dot or not stem:
        raise ShardError(f"{where} is not named <key>.<extension>")
    return str(posix.parent / stem), extension.lower()


def _parse_label(text: bytes, where: str, num_classes: int | None) -> int:
    value = text.decode("ascii", errors="replace").strip()
    if not value.isascii() or not value.isdigit():
        raise ShardError(f"{where}: label {value!r:.40} is not a non-negative integer")
    label = int(value)
    limit = _INT64_MAX + 1 if num_classes is None else num_classes
    if label >= limit:
        known = f"0..{num_classes - 1}, the manifest's classes" if num_classes else "int64"
        raise ShardError(f"{where}: label {value:.40} is out of range ({known})")
    return label


def sample_records(path: Path, members: Iterator[tuple[tarfile.TarInfo, bytes]],
                   num_classes: int | None) -> Iterator[ShardRecord]:
    """The samples of a stream of tar members ``(member, bytes)``: one image and one ``.cls`` per key.

    Raises:
        ShardError: Naming the shard and member, for an unsafe member, an incomplete or repeated
            sample, or a label out of range.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    key, fields, seen = None, {}, set()
    for member, data in itertools.chain(members, [(None, b"")]):
        sample_key, extension = _check_member(path, member) if member else (None, "")
        if sample_key != key and key is not None:
            image = [e for e in fields if e in _IMAGE_MEMBERS]
            if len(image) != 1 or "cls" not in fields or len(fields) != 2:
                raise ShardError(f"shard {path}: sample {key!r} has members {sorted(fields)}, "
                                 "expected one image and one .cls")
            yield ShardRecord(path.name, key, f"{key}.{image[0]}", fields[image[0]],
                              _parse_label(fields["cls"], f"shard {path}: member {key}.cls",
                                           num_classes))
            seen.add(key)
            fields = {}
        if member is None:
            return
        if sample_key in seen or extension in fields:
            raise ShardError(f"shard {path}: member {member.name!r} repeats sample {sample_key!r}")
        key, fields[extension] = sample_key, data


def read_shard(path: str | os.PathLike, *, expected: int | None = None,
               num_classes: int | None = None,
               max_member_bytes: int | None = None) -> Iterator[ShardRecord]:
    """Stream the samples of one shard in stored order, sequentially, without extracting.

    Args:
        path: The tar file.
        expected: If given, the shard must hold exactly this many samples.
        num_classes: If given, every label must lie in ``0 .. num_classes - 1``.
        max_member_bytes: The most bytes a member may claim (default ``MAX_MEMBER_BYTES``).

    Raises:
        ShardError: Naming the shard and member, for a truncated or corrupt tar, an unsafe,
            sparse, oversized or non-regular member, an incomplete sample, a label out of
            range, or a wrong sample count.

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    path = Path(path)
    last = "(the tar header)"
    limit = MAX_MEMBER_BYTES if max_member_bytes is None else max_member_bytes

    def members() -> Iterator[tuple[tarfile.TarInfo, bytes]]:
        nonlocal last
        with tarfile.open(path, mode="r|") as tar:  # "r|": a forward-only stream
            for member in tar:
                last = member.name
                if member.issparse():  # holes would be read back as (lots of) zeros
                    raise ShardError(f"shard {path}: member {member.name!r} is a sparse file "
                                     "(refused: a shard holds plain members only)")
                if member.size > limit:
                    raise ShardError(f"shard {path}: member {member.name!r} claims "
                                     f"{member.size:,} bytes, over the limit of {limit:,} "
                                     "(common.shards.format.MAX_MEMBER_BYTES)")
                handle = tar.extractfile(member) if member.isreg() else None
                data = handle.read() if handle else b""
                if len(data) != (member.size if handle else 0):
                    # a stream-mode tarfile returns a short read here instead of failing
                    raise tarfile.ReadError(f"only {len(data)} of {member.size} bytes")
                yield member, data
            if path.stat().st_size < tar.offset + 2 * tarfile.BLOCKSIZE:
                # tarfile also stops quietly at a cut between members: check the zero trailer
                raise tarfile.ReadError("no end-of-archive marker after it; the file is cut")

    count = 0
    try:
        for record in sample_records(path, members(), num_classes):
            count += 1
            yield record
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ShardError(f"shard {path}: cannot read member {last!r} (truncated or corrupt "
                         f"tar): {error}") from error
    if expected is not None and count != expected:
        raise ShardError(f"shard {path}: holds {count} samples but the manifest says "
                         f"{expected} (truncated?)")


def decode_image(record: ShardRecord, *, max_pixels: int | None = None) -> Image.Image:
    """Decode a record's image bytes fully as RGB, naming shard and member on failure.

    ``max_pixels``: refuse larger images (default ``PIL.Image.MAX_IMAGE_PIXELS``; see
    ``common.data.check_pixels``).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    with decode_errors(f"shard {record.shard}: member {record.member}: cannot decode image",
                       ShardError):
        with open_image(io.BytesIO(record.data), max_pixels=max_pixels) as image:
            return viewer_rgb(image, copy=False)  # as common.data.load_rgb: EXIF, 16 bits, ...
