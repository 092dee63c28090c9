"""The one listing of a folder of class folders (``ROOT/<class>/.../<image>``) that every path reads.

The decode pipeline, the uint8 cache, the shards (``make_shards.py --imagefolder``), the trainers'
``--data`` and ``python -m common.images.check`` all take a split's samples from
:func:`list_folder`, so they read the same classes and the same files, each once:

- **System and hidden entries are skipped and counted** (one line, :meth:`FolderListing.summary`):
  names starting with a dot (``.ipynb_checkpoints/``, ``.cache/``, ``.DS_Store``, AppleDouble
  ``._*``), ``__MACOSX/``, Synology's ``@eaDir/``, ``Thumbs.db``, ``desktop.ini``.
- **Every regular file is decided by its content, not its suffix**: what Pillow can open is an
  image (a PNG called ``.jpg``, a file without a suffix, ``.jfif``, an animated GIF: its first
  frame); a known format Pillow cannot decode here (HEIC, AVIF, JPEG XL without a plugin) is
  skipped with that reason; any other file is skipped as "not an image"; all of them named.
  A file beside the class folders (``train/x.jpg``) has no class: skipped, named.
- **Refused, naming the file** (:class:`FolderError`): a FIFO, device or socket (never opened, so
  nothing hangs), a broken link, an unreadable file, a name that is not UTF-8, two class folders
  that differ only in case or Unicode form (``café`` typed on Linux and copied from a Mac), a
  class folder without one image.
- **Each file once**: a link to a folder already listed (a symbolic-link loop) or to a file
  already listed is skipped, named.
- **Class names are NFC-normalized** and sorted, numbered ``0..K-1`` as torchvision's
  ``ImageFolder`` numbers them; on a clean folder the samples are ``ImageFolder``'s, in its order.
- **Checked once while unchanged** (``known=``, what the trainers pass): the images the content
  check found are kept in a JSON file (:class:`KnownImages`) with each file's size, modification
  and change times and inode; a file whose four are the same is not opened again. Editing,
  replacing, copying or touching a file changes them, and it is checked again; files that are
  not images are checked every time. ``python -m common.images.check`` always checks every file.
"""

from __future__ import annotations

import json
import os
import stat
import unicodedata
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from common.annotations import BadSampleError
from common.atomic_io import write_atomically

#: System entries skipped by name, and what they are.
SYSTEM_NAMES = {"__MACOSX": "macOS zip metadata", "@eaDir": "Synology thumbnails",
                "Thumbs.db": "Windows thumbnails", "desktop.ini": "Windows folder settings"}
#: Image formats Pillow cannot decode without a plugin, by the brand of their ``ftyp`` box.
_FTYP_BRANDS = {b"heic": "HEIC", b"heix": "HEIC", b"hevc": "HEIC", b"heim": "HEIC",
                b"heis": "HEIC", b"mif1": "HEIF", b"msf1": "HEIF", b"avif": "AVIF",
                b"avis": "AVIF"}
#: Names that promise an image: such a file Pillow cannot open is refused as damaged, not skipped.
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".tif", ".tiff",
                  ".webp", ".ppm", ".pgm", ".pbm", ".pnm"}
_RAW_SUFFIXES = {".cr2", ".cr3", ".nef", ".arw", ".orf", ".rw2", ".raf"}


class FolderError(BadSampleError):
    """A folder that cannot be read as it is: the message names every file or folder at fault.

    Introduced in docs/scripts.md ("Your own images").
    """


@dataclass(frozen=True)
class Entry:
    """A file or folder the listing left out (``skipped``) or refuses (``problems``), and why.

    Introduced in docs/scripts.md ("Your own images").
    """

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class FolderListing:
    """What :func:`list_folder` found: classes, samples ``(path, label)`` with their formats,
    system entries skipped (counted by name), files skipped (named) and problems (refused).

    Introduced in docs/scripts.md ("Your own images").
    """

    root: Path
    classes: tuple[str, ...] = ()
    samples: list[tuple[str, int]] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    junk: Counter = field(default_factory=Counter)
    skipped: list[Entry] = field(default_factory=list)
    problems: list[Entry] = field(default_factory=list)

    def summary(self) -> str:
        """One line: images and classes; what was skipped and why; how many problems."""
        line = f"{self.root}: {len(self.samples)} images in {len(self.classes)} classes"
        if self.junk:
            kinds = ", ".join(f"{name} x{count}" for name, count in sorted(self.junk.items()))
            line += f"; skipped {sum(self.junk.values())} system or hidden entries ({kinds})"
        if self.skipped:
            shown = "; ".join(f"{os.path.relpath(entry.path, self.root)}: {entry.reason}"
                              for entry in self.skipped[:3])
            more = f"; and {len(self.skipped) - 3} more" if len(self.skipped) > 3 else ""
            line += f"; skipped {len(self.skipped)} file(s): {shown}{more}"
        if self.problems:
            line += f"; {len(self.problems)} problem(s), first: {self.problems[0]}"
        return line

    def refuse(self) -> FolderListing:
        """``self`` if it has no problem; else :class:`FolderError` naming every one."""
        if self.problems:
            rest = "".join(f"\n  {entry}" for entry in self.problems[1:])
            raise FolderError(f"{self.root}: {len(self.problems)} problem(s) to fix before this "
                              f"folder can be read (python -m common.images.check lists them "
                              f"all); first: {self.problems[0]}{rest}")
        return self


def system_entry(name: str) -> str | None:
    """The name under which a system or hidden entry is counted, or ``None`` for a user's entry.

    Introduced in docs/scripts.md ("Your own images").
    """
    if name in SYSTEM_NAMES:
        return name
    if name.startswith("._"):
        return "._* (AppleDouble)"
    if name.startswith("."):
        return name if name in (".ipynb_checkpoints", ".DS_Store") else ".* (hidden)"
    return None


def not_utf8(name: str) -> str:
    """``""``, or why the file-system name ``name`` (decoded by Python with surrogate escapes)
    cannot be used: it is not UTF-8 (typically a zip made on Windows, in GBK or CP437).

    Introduced in docs/scripts.md ("Your own images").
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return (f"the name {os.fsencode(name)!r} is not UTF-8 (a zip made on Windows?): rename "
                "it, e.g. convmv -f gbk -t utf-8 --notest -r DIR")
    return ""


def image_format(path: str | os.PathLike) -> tuple[str, str]:
    """``(format, "")`` for a file Pillow opens (its header only), else ``("", why it is not used)``.

    The file must be a regular file (check that first: a FIFO would block ``open``).

    Introduced in docs/scripts.md ("Your own images").
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as image:
                return image.format or "image", ""
    except Image.DecompressionBombError as error:
        return "", f"over Pillow's pixel limit ({error})"
    except (OSError, SyntaxError, ValueError):
        pass
    try:
        with open(path, "rb") as handle:
            head = handle.read(32)
    except OSError as error:
        return "", f"cannot be read ({error.strerror})"
    if head[4:8] == b"ftyp" and head[8:12] in _FTYP_BRANDS:
        kind = _FTYP_BRANDS[head[8:12]]
        return "", (f"a {kind} image, which this Pillow cannot decode (install pillow-heif, or "
                    "convert it to JPEG)")
    if head.startswith(b"\xff\x0a") or head[4:8] == b"JXL ":
        return "", "a JPEG XL image, which this Pillow cannot decode (convert it to JPEG or PNG)"
    if Path(path).suffix.lower() in _RAW_SUFFIXES:
        return "", "a camera raw file (convert it to JPEG or PNG first)"
    if not head:
        return "", "an empty file"
    return "", "not an image (Pillow cannot open it)"


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


class KnownImages:
    """The images an earlier content check found under a folder, read from and written to the
    JSON file ``path``: ``{"version": 1, "files": {relative path: [size, mtime_ns, ctime_ns,
    inode, format]}}``.

    :meth:`format` answers for a file only while its ``os.stat`` still shows those four numbers
    (a change of content, a replaced or copied file, ``touch``: checked again). A missing or
    damaged file is an empty record; :meth:`save` writes what this listing found (files gone
    are dropped) only when it differs, atomically (ranks may write at once), and skips a place
    it cannot write: the listing is the same either way, only slower next time.

    Introduced in docs/scripts.md ("Your own images").
    """

    VERSION = 1

    def __init__(self, path: str | os.PathLike) -> None:
        self.path, self.found = Path(path), {}
        self.recorded = self._read()

    def _read(self) -> dict:
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(saved, dict) or saved.get("version") != self.VERSION:
            return {}
        return saved["files"] if isinstance(saved.get("files"), dict) else {}

    @staticmethod
    def _stamp(info: os.stat_result) -> list[int]:
        return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]

    def format(self, key: str, info: os.stat_result) -> str:
        """The recorded format of the file ``key`` whose ``os.stat`` is ``info``, or ``""``."""
        entry = self.recorded.get(key)
        if (isinstance(entry, list) and len(entry) == 5 and entry[:4] == self._stamp(info)
                and isinstance(entry[4], str) and entry[4]):
            self.found[key] = entry
            return entry[4]
        return ""

    def remember(self, key: str, info: os.stat_result, fmt: str) -> None:
        """Record that the content check found the image ``key`` (``info``) to be ``fmt``."""
        self.found[key] = [*self._stamp(info), fmt]

    def save(self) -> None:
        """Write what this listing found, if it differs from what was read."""
        if self.found == self.recorded:
            return
        body = json.dumps({"version": self.VERSION, "files": self.found}, ensure_ascii=False)
        try:
            write_atomically(self.path, lambda file: file.write(body.encode("utf-8")))
        except OSError:
            pass  # a read-only place: the next listing checks every file again


class _Walk:
    """One split's walk: links followed, each folder and each file listed once."""

    def __init__(self, listing: FolderListing, known: KnownImages | None = None) -> None:
        self.listing, self.folders, self.files, self.known = listing, set(), {}, known
        self.prefix = os.path.join(os.fspath(listing.root), "")

    def image_format(self, path: str, info: os.stat_result) -> tuple[str, str]:
        """:func:`image_format`, or the format ``self.known`` recorded for this unchanged file."""
        if self.known is None:
            return image_format(path)
        key = path[len(self.prefix):] if path.startswith(self.prefix) else path
        if fmt := self.known.format(key, info):
            return fmt, ""
        fmt, why = image_format(path)
        if fmt:
            self.known.remember(key, info, fmt)
        return fmt, why

    def stat(self, path: str) -> os.stat_result | None:
        try:
            return os.stat(path)  # follows links
        except FileNotFoundError:
            self.listing.problems.append(Entry(path, "a broken symbolic link"))
        except OSError as error:
            self.listing.problems.append(Entry(path, f"cannot be read ({error.strerror})"))
        return None

    def folder(self, path: str, info: os.stat_result) -> bool:
        key = (info.st_dev, info.st_ino)
        if key in self.folders:
            self.listing.skipped.append(Entry(path, "a link to a folder already listed "
                                                    "(a symbolic-link loop?)"))
            return False
        self.folders.add(key)
        return True

    def images(self, folder: str) -> list[tuple[str, str]]:
        """``(path, format)`` of every image under ``folder``, in ``ImageFolder``'s order."""
        found = []  # (dirpath, [(name, path, format)]) as sorted(os.walk(...)) orders them
        self._collect(folder, found)
        return [(path, fmt) for _, names in sorted(found) for _, path, fmt in sorted(names)]

    def _collect(self, folder: str, found: list) -> None:
        names, subfolders = [], []
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError as error:
            self.listing.problems.append(Entry(folder, f"cannot be listed ({error.strerror})"))
            return
        for entry in entries:
            if (junk := system_entry(entry.name)) is not None:
                self.listing.junk[junk] += 1
                continue
            if problem := not_utf8(entry.name):
                self.listing.problems.append(Entry(os.path.join(folder, entry.name), problem))
                continue
            info = self.stat(entry.path)
            if info is None:
                continue
            if stat.S_ISDIR(info.st_mode):
                if self.folder(entry.path, info):
                    subfolders.append(entry.path)
            elif not stat.S_ISREG(info.st_mode):
                self.listing.problems.append(Entry(entry.path, f"{_kind(info.st_mode)}, not a "
                                                               "regular file: refused (never opened)"))
            elif (first := self.files.setdefault((info.st_dev, info.st_ino), entry.path)) \
                    != entry.path:
                self.listing.skipped.append(Entry(entry.path, f"the same file as {first} "
                                                              "(a link): listed once"))
            else:
                fmt, why = self.image_format(entry.path, info)
                if fmt:
                    names.append((entry.name, entry.path, fmt))
                elif why.startswith("cannot be read") or (
                        Path(entry.name).suffix.lower() in IMAGE_SUFFIXES
                        and why in ("an empty file", "not an image (Pillow cannot open it)")):
                    self.listing.problems.append(Entry(entry.path, f"{why}, though its name "
                                                       "says image: a damaged file?"
                                                       if not why.startswith("cannot") else why))
                else:
                    self.listing.skipped.append(Entry(entry.path, why))
        found.append((folder, names))
        for sub in subfolders:
            self._collect(sub, found)


def class_key(name: str) -> str:
    """Two class names that are one class for a person: NFC form, case folded.

    Introduced in docs/scripts.md ("Your own images").
    """
    return unicodedata.normalize("NFC", name).casefold()


def list_folder(root: str | os.PathLike, *, classes: tuple[str, ...] | None = None,
                empty_classes: bool = False,
                known: str | os.PathLike | None = None) -> FolderListing:
    """The classes and images of ``root`` (``root/<class>/.../<image>``), nothing refused yet.

    Args:
        classes: Number the labels by these (the training split's) classes; a class folder
            not among them is a problem.
        empty_classes: Accept a class folder without an image (else a problem).
        known: A JSON file of the images found before (:class:`KnownImages`): unchanged files
            are not opened again, and the file is updated. ``None``: every file is opened.

    Call :meth:`FolderListing.refuse` to raise on the problems, or read them all
    (``python -m common.images.check``).

    Introduced in docs/scripts.md ("Your own images").
    """
    listing = FolderListing(Path(root))
    walk = _Walk(listing, None if known is None else KnownImages(known))
    info = walk.stat(os.fspath(root))
    if info is None or not stat.S_ISDIR(info.st_mode):
        listing.problems.append(Entry(os.fspath(root), "not a folder"))
        return listing
    walk.folder(os.fspath(root), info)
    folders: dict[str, str] = {}  # NFC name -> path
    seen: dict[str, str] = {}  # class_key -> first folder name
    for entry in sorted(os.scandir(root), key=lambda entry: entry.name):
        if (junk := system_entry(entry.name)) is not None:
            listing.junk[junk] += 1
            continue
        if problem := not_utf8(entry.name):
            listing.problems.append(Entry(entry.path, problem))
            continue
        entry_info = walk.stat(entry.path)
        if entry_info is None:
            continue
        if not stat.S_ISDIR(entry_info.st_mode):
            if not stat.S_ISREG(entry_info.st_mode):
                listing.problems.append(Entry(entry.path, f"{_kind(entry_info.st_mode)}, not a "
                                                          "regular file: refused (never opened)"))
            else:
                listing.skipped.append(Entry(entry.path, "a file outside the class folders "
                                                         "(no class): move it into one"))
            continue
        name, key = unicodedata.normalize("NFC", entry.name), class_key(entry.name)
        if key in seen:
            listing.problems.append(Entry(entry.path, f"class folders {seen[key]!r} and "
                                          f"{entry.name!r} differ only in case or Unicode form "
                                          "(NFC/NFD): merge them or rename one"))
            if walk.folder(entry.path, entry_info):
                walk.images(entry.path)  # its own problems are found too (all at once)
            continue
        if walk.folder(entry.path, entry_info):
            seen[key], folders[name] = entry.name, entry.path
    names = tuple(sorted(folders)) if classes is None else tuple(classes)
    index = {name: label for label, name in enumerate(names)}
    for name in sorted(folders):
        if name not in index:
            listing.problems.append(Entry(folders[name], f"class {name!r} is not a class of the "
                                          f"training split (classes: {list(names)})"))
            continue
        images = walk.images(folders[name])
        if not images and not empty_classes:
            listing.problems.append(Entry(folders[name], "a class folder without one image"))
        for path, fmt in images:
            listing.samples.append((path, index[name]))
            listing.formats.append(fmt)
    listing.classes = names
    if walk.known is not None:
        walk.known.save()
    return listing
