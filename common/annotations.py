"""Reading an annotations CSV safely: its text, rows, labels, paths and repeated files.

``BadSampleError`` (re-exported by ``common.data``) is the error every dataset raises for a
sample it cannot use; the functions here are the checks ``CustomImageDataset`` and
``CsvImageStream`` run on each row before any image is opened.
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a CSV is read: an ImageFolder run never loads it
    import pandas as pd

#: The four flags of the guide's layout (an annotations CSV and its image folder per split), in
#: the order ``--help`` lists them; the trainers and ``python -m common.images.check`` take them.
CSV_FLAGS = ("train_csv", "train_images", "val_csv", "val_images")
_INTEGER = re.compile(r"^[+-]?\d+$")
_INT64_MAX = np.iinfo(np.int64).max


class BadSampleError(ValueError):
    """A sample that cannot be used: the message names the file (and CSV line).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """


def decode_text(data: bytes, source: str, *, first_line: int = 1) -> str:
    """UTF-8 ``data`` as text (a leading BOM dropped), refusing binary or other encodings.

    Raises:
        BadSampleError: Naming ``source`` and the line of the first NUL byte or of the
            first byte that is not UTF-8 (Latin-1, a binary file, ...).

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    nul = data.find(b"\x00")
    if nul >= 0:
        line = first_line + data.count(b"\n", 0, nul)
        raise BadSampleError(f"{source} line {line}: holds a "
                             "NUL byte (a binary file, or a NUL in a file name); an annotations "
                             "file must be UTF-8 text")
    try:
        return data.decode("utf-8-sig" if first_line == 1 else "utf-8")
    except UnicodeDecodeError as error:
        line = first_line + data.count(b"\n", 0, error.start)
        raise BadSampleError(f"{source} line {line}: not UTF-8 text (byte "
                             f"0x{data[error.start]:02x}); save it as UTF-8, e.g. "
                             "iconv -f latin1 -t utf-8") from error


def resolve_inside(root: Path, relative: str, *, where: str) -> Path:
    """Join ``root / relative`` and refuse anything that leaves ``root``.

    Refuses absolute paths, ``..`` components and symbolic links pointing outside
    ``root``; also refuses a path that is not an existing regular file.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    if "\x00" in relative:
        raise BadSampleError(f"{where}: path {relative!r} holds a NUL byte")
    candidate = Path(relative)
    if candidate.is_absolute() or ".." in candidate.parts or relative.strip() == "":
        raise BadSampleError(f"{where}: path {relative!r} must be relative to {root} "
                             "without '..' components")
    resolved = (root / candidate).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise BadSampleError(f"{where}: path {relative!r} escapes {root} (it resolves to "
                             f"{resolved}, through a symbolic link)")
    if not resolved.is_file():
        raise BadSampleError(f"{where}: file {relative!r} not found in {root}")
    return resolved


def parse_label(text: str, *, where: str, num_classes: int | None = None) -> int:
    """Parse a CSV label: an integer in ``0 .. num_classes - 1`` (or ``>= 0``).

    Raises:
        BadSampleError: Naming ``where`` if the text is not an integer or out of range.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    if not _INTEGER.match(text.strip()):
        raise BadSampleError(f"{where}: label {text!r} is not an integer")
    value = int(text)
    if value < 0 or (num_classes is not None and value >= num_classes):
        limit = f"0..{num_classes - 1}" if num_classes is not None else ">= 0"
        raise BadSampleError(f"{where}: label {value} is not a known class ({limit})")
    if value > _INT64_MAX:
        raise BadSampleError(f"{where}: label {text.strip()!r} does not fit in a 64-bit integer")
    return value


def read_annotations(annotations_file: Path) -> pd.DataFrame:
    """The CSV as a frame of strings (``file_name, label``), refusing what is not one.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    try:
        data = annotations_file.read_bytes()
    except FileNotFoundError as error:
        raise FileNotFoundError(f"annotations file {annotations_file} does not exist") from error
    text = decode_text(data, str(annotations_file))
    import pandas as pd  # ~0.4 s of CPU: only where a CSV is read

    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError as error:
        raise BadSampleError(f"{annotations_file} is empty (expected a header line "
                             "'file_name,label' and one line per image)") from error
    except pd.errors.ParserError as error:
        raise BadSampleError(f"{annotations_file} is not a well-formed CSV: {error}") from error
    if frame.shape[1] != 2:
        raise BadSampleError(f"{annotations_file}: expected 2 columns (file name, label), found "
                             f"{frame.shape[1]}: {list(frame.columns)}")
    if len(frame) == 0:
        raise BadSampleError(f"{annotations_file} has a header but no rows")
    if _INTEGER.match(str(frame.columns[1]).strip()):
        # pandas took the first data row as the header: refuse rather than lose a sample
        raise BadSampleError(f"{annotations_file} line 1: {list(frame.columns)} looks like a "
                             "data row; the CSV needs a header line 'file_name,label'")
    return frame


def check_duplicates(csv_name: str, frame: pd.DataFrame, paths: list[str], labels: list[int],
                      lines: list[int], skipped: list, on_bad: str) -> tuple[list[int], pd.DataFrame]:
    """Which usable rows to keep, and the repeated ones; refuses a file with two labels.

    ``paths``, ``labels``, ``lines``: the usable rows so far; with ``on_bad="skip"`` every row
    of a file with conflicting labels is appended to ``skipped`` and left out.

    Introduced in chapters/02_1_dataset_dataloader.ipynb.
    """
    rows_of: dict[str, list[int]] = {}
    for i, path in enumerate(paths):
        rows_of.setdefault(path, []).append(i)
    names = frame.iloc[:, 0].tolist()
    conflicting, repeats = set(), []
    for rows in rows_of.values():
        if len(rows) < 2:
            continue
        name = names[lines[rows[0]] - 2]
        if len({labels[i] for i in rows}) > 1:
            listed = ", ".join(f"line {lines[i]} label {labels[i]}" for i in rows)
            reason = (f"{csv_name} line {lines[rows[1]]}: file {name!r} has conflicting labels "
                      f"({listed}); one file needs one label")
            if on_bad == "raise":
                raise BadSampleError(reason)
            conflicting.update(rows)
            skipped.extend((lines[i], names[lines[i] - 2], reason) for i in rows)
        else:
            repeats.extend((lines[i], names[lines[i] - 2], lines[rows[0]]) for i in rows[1:])
    import pandas as pd

    duplicates = pd.DataFrame(repeats, columns=["line", "file_name", "first_line"])
    if repeats:
        line, name, first = repeats[0]
        warnings.warn(f"{csv_name}: {len(repeats)} row(s) repeat a file already listed with the "
                      f"same label, first {name!r} at line {line} (also line {first}); each row "
                      "is kept as a sample, listed in .duplicates", stacklevel=3)
    return [i for i in range(len(paths)) if i not in conflicting], duplicates


def csv_flag_problems(config) -> dict[str, str]:
    """``{field: problem}`` for the guide's layout flags: all four together, not with ``--data``.

    Introduced in docs/scripts.md ("Your own images").
    """
    given = [name for name in CSV_FLAGS if getattr(config, name)]
    if not given:
        return {}
    if getattr(config, "data", ""):
        return {"data": "give --data DIR or the annotations CSV flags (--train-csv, ...), not both"}
    missing = [name for name in CSV_FLAGS if name not in given]
    return {name: f"is needed with --{given[0].replace('_', '-')} (an annotations CSV and its "
                  "image folder, for training and for validation)" for name in missing}
