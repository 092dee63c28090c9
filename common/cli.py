"""Command lines built from configuration dataclasses: one rule for every entry point.

Each field of a ``@dataclass`` becomes a flag (``batch_size`` -> ``--batch-size``) whose help
comes from ``option(..., help=...)``. A *preset* (``--tiny`` for tests, ``--quick`` for a short
benchmark) fills in its values only where no flag was given: **flags given always win**.

    @dataclass
    class Config:
        lr: float = option(3e-3, "peak learning rate")
        tiny: bool = option(False, "a configuration small enough for tests")

    config = parse_dataclass_args(Config, argv, description="...", presets={"tiny": {"lr": 0.05}})

Every ``main`` returns an exit code and modules end with ``raise SystemExit(main())``.

The contract every entry point keeps: a bad value is an argparse error naming the flag (exit
status 2), found by the config's ``validate`` function, which merges the validators below
(``positive``, ``finite``, ``in_range``, ``is_dir``, ``is_file_or_absent``, ``distinct_files``,
...) once per flag; what only the run can find (a file's content) is one line from ``fail``
(exit status 1). Never a traceback, never exit status 0 with a meaningless result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any, TypeVar

T = TypeVar("T")


def option(default: Any, help: str, *, choices: Sequence[Any] | None = None,
           positional: bool = False, nargs: str | None = None) -> Any:
    """A dataclass field that is also a documented command-line flag.

    Args:
        default: The default value (use a tuple for a sequence: no mutable defaults).
        help: One line for ``--help``; ``%`` is shown literally.
        choices: The allowed values, checked by argparse.
        positional: A positional argument instead of a ``--flag``.
        nargs: argparse's ``nargs`` (e.g. ``"*"`` for a list of paths).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    metadata = {"help": help, "choices": choices, "positional": positional, "nargs": nargs}
    return dataclasses.field(default=default, metadata=metadata)


def _plain_type(hint: Any) -> Any:
    """``int | None`` -> ``int``; ``tuple[Path, ...]`` -> ``Path``; others unchanged."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _plain_type(args[0])
    if origin in (tuple, list):
        return _plain_type(typing.get_args(hint)[0])
    return hint


def flag_name(name: str) -> str:
    """``batch_size`` -> ``--batch-size``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return "--" + name.replace("_", "-")


def _add_field(parser: argparse.ArgumentParser, item: dataclasses.Field, hint: Any) -> None:
    meta = item.metadata
    default = item.default if item.default is not dataclasses.MISSING else None
    text = str(meta.get("help", item.name)).replace("%", "%%")
    kind = _plain_type(hint)
    if meta.get("positional"):
        nargs = meta.get("nargs")
        parser.add_argument(item.name, type=kind, nargs=nargs, choices=meta.get("choices"),
                            help=text, **({"default": default} if nargs in ("*", "?") else {}))
        return
    if item.default is dataclasses.MISSING:
        text += " (required)"
    elif "(default:" not in text:  # a help that says its default in words keeps its own
        shown = os.fspath(default) if isinstance(default, PurePath) else repr(default)
        text += f" (default: {shown})"
    if kind is bool:
        parser.add_argument(flag_name(item.name), action=argparse.BooleanOptionalAction, help=text)
        return
    parser.add_argument(flag_name(item.name), type=kind, help=text, choices=meta.get("choices"),
                        nargs=meta.get("nargs"), required=item.default is dataclasses.MISSING
                        and item.default_factory is dataclasses.MISSING)


def build_parser(config_cls: type, *, description: str, epilog: str | None = None
                 ) -> argparse.ArgumentParser:
    """An argparse parser with one argument per field of ``config_cls``; unset flags stay absent.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    parser = argparse.ArgumentParser(description=description.replace("%", "%%"), epilog=epilog,
                                     argument_default=argparse.SUPPRESS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    hints = typing.get_type_hints(config_cls)
    for item in dataclasses.fields(config_cls):
        _add_field(parser, item, hints[item.name])
    return parser


def _coerce(config_cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Lists from ``nargs`` become tuples where the field is a tuple (hashable, immutable)."""
    hints = typing.get_type_hints(config_cls)
    return {key: (tuple(value) if isinstance(value, list)
                  and typing.get_origin(hints[key]) is tuple else value)
            for key, value in values.items()}


def parse_dataclass_args(config_cls: type[T], argv: Sequence[str] | None = None, *,
                         description: str,
                         presets: Mapping[str, Mapping[str, Any]] | None = None,
                         validate: Callable[[T], Mapping[str, str]] | None = None,
                         epilog: str | None = None) -> T:
    """Parse ``argv`` into ``config_cls``: defaults, then a preset's values, then the flags given.

    Args:
        config_cls: The configuration dataclass.
        argv: The arguments (default: ``sys.argv[1:]``).
        description: The first line of ``--help``.
        presets: ``{"tiny": {...}}``: when the bool field ``tiny`` is set, its values fill in
            every field that no flag set.
        validate: Returns ``{field: problem}`` for a finished config; each problem becomes an
            argparse error (exit status 2) naming the flag.
        epilog: Text after the flags in ``--help`` (e.g. example commands).

    Returns:
        The configuration.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    parser = build_parser(config_cls, description=description, epilog=epilog)
    given = vars(parser.parse_args(None if argv is None else list(argv)))
    chosen: dict[str, Any] = {}
    for name, values in (presets or {}).items():
        if given.get(name):
            chosen.update(values)
    config = config_cls(**_coerce(config_cls, {**chosen, **given}))
    problems = dict(validate(config)) if validate else {}
    if problems:
        parser.error("; ".join(f"{flag_name(name)}: {text}" for name, text in problems.items()))
    return config


# Validators: each takes the finished config and field names and returns ``{field: problem}``
# (empty when all is well), to be merged into one ``validate`` function per config dataclass.
# A tuple field (``nargs="+"``) is checked element by element.

def _values(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def at_least(config: Any, minimum: float, *names: str, why: str = "") -> dict[str, str]:
    """``{name: "must be at least 8 (why), got 4"}`` for each named field below ``minimum``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    reason = f" ({why})" if why else ""
    return {name: f"must be at least {minimum}{reason}, got {getattr(config, name)!r}"
            for name in names if any(v < minimum for v in _values(getattr(config, name)))}


def positive(config: Any, *names: str) -> dict[str, str]:
    """``{name: "must be at least 1, got 0"}`` for each named field below 1 (for ``validate``).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {name: f"must be at least 1, got {getattr(config, name)}"
            for name in names if any(v < 1 for v in _values(getattr(config, name)))}


def non_negative(config: Any, *names: str) -> dict[str, str]:
    """``{name: "must be 0 or more, got -3"}`` for each named field below 0 (for ``validate``).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {name: f"must be 0 or more, got {getattr(config, name)}"
            for name in names if any(v < 0 for v in _values(getattr(config, name)))}


def finite(config: Any, *names: str) -> dict[str, str]:
    """``{name: "must be a finite number, got nan"}`` for each named field that is nan or inf.

    ``nan < 0`` is False, so ``non_negative`` alone lets a NaN learning rate through.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {name: f"must be a finite number, got {getattr(config, name)}"
            for name in names if not all(math.isfinite(v) for v in _values(getattr(config, name)))}


def in_range(config: Any, name: str, low: float, high: float) -> dict[str, str]:
    """``{name: "must be between low and high, got x"}`` unless ``low <= value <= high`` (finite).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    values = _values(getattr(config, name))
    if all(math.isfinite(v) and low <= v <= high for v in values):
        return {}
    return {name: f"must be between {low} and {high}, got {getattr(config, name)}"}


def _first_existing(path: Path) -> Path:
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _path_problems(config: Any, names: tuple[str, ...],
                   problem: Callable[[Path, str], str]) -> dict[str, str]:
    """``{name: problem(path, value)}`` for each given path value (``""``/``None`` pass)."""
    problems = {}
    for name in names:
        for value in _values(getattr(config, name)):
            if value not in ("", None) and (found := problem(Path(value), value)):
                problems[name] = found
    return problems


def is_file(config: Any, *names: str) -> dict[str, str]:
    """``{name: "... does not exist" / "... is a folder, not a file"}`` for input files.

    Empty values (``""``, ``None``: "not given") pass.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return _path_problems(config, names, lambda path, value: (
        f"{value} does not exist" if not path.exists()
        else f"{value} is a folder, not a file" if not path.is_file() else ""))


def is_dir(config: Any, *names: str) -> dict[str, str]:
    """``{name: "... does not exist" / "... is a file, not a folder"}`` for input folders.

    Empty values (``""``, ``None``: "not given") pass.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return _path_problems(config, names, lambda path, value: (
        f"{value} does not exist" if not path.exists()
        else f"{value} is a file, not a folder" if not path.is_dir() else ""))


def holds(config: Any, name: str, member: str, *, hint: str = "") -> dict[str, str]:
    """An input folder that must exist and hold ``member`` (e.g. ``train/labels.csv``).

    Introduced in chapters/03_1_efficient_pipelines.ipynb.
    """
    root = getattr(config, name)
    if root in ("", None) or (problems := is_dir(config, name)):
        return {} if root in ("", None) else problems
    if not (Path(root) / member).is_file():
        return {name: f"{root} holds no {member}" + (f" ({hint})" if hint else "")}
    return {}


def is_dir_or_absent(config: Any, *names: str) -> dict[str, str]:
    """Output folders: each must be a folder, or creatable (its first existing parent a folder).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return _path_problems(config, names, lambda path, value: (
        f"{value} is a file, not a folder" if path.exists() and not path.is_dir()
        else f"cannot create {value}: {_first_existing(path)} is not a folder"
        if not path.exists() and not _first_existing(path).is_dir() else ""))


def writable_file(path: str | Path | None) -> str:
    """Why a file cannot be written at ``path`` (``""`` if it can, or if no path is given).

    Checked at start, so a run does not train an epoch and then fail to save it.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if path in ("", None):
        return ""
    target = Path(path)
    if target.is_dir():
        return f"{path} is a folder, not a file"
    folder = _first_existing(target.parent)  # the rest gets created
    if not folder.is_dir():
        return f"cannot create {path}: {folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot create {path}: {folder} is not writable"
    return ""


def is_file_or_absent(config: Any, *names: str) -> dict[str, str]:
    """Output files: each must be a file, or creatable (see :func:`writable_file`).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {name: problem for name in names
            if (problem := writable_file(getattr(config, name)))}


def distinct_files(config: Any, *names: str) -> dict[str, str]:
    """Two output flags naming one file would destroy each other: the later one is refused;
    so is one inside the other's path (``--log-file out --snapshot out/s.pt``: the first
    written leaves no room for the second).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    seen: dict[Path, str] = {}
    problems = {}
    for name in names:
        value = getattr(config, name)
        if value in ("", None):
            continue
        path = Path(value).resolve()
        nested = next((other for other in seen if other in path.parents or path in other.parents),
                      None)
        if path in seen:
            problems[name] = f"names the same file as {flag_name(seen[path])} ({value})"
        elif nested is not None:
            problems[name] = (f"{value} and {flag_name(seen[nested])} {nested} are inside one "
                              "another: one path cannot be a file and a folder")
        else:
            seen[path] = name
    return problems


def file_name_part(config: Any, *names: str) -> dict[str, str]:
    """A prefix of file names: no folder separators, no ``..`` (nothing written outside ``--out``).

    Introduced in chapters/05_sharded_datasets.ipynb.
    """
    bad = {name: f"is a file-name prefix, not a path: {getattr(config, name)!r}"
           for name in names
           if any(sep in getattr(config, name) for sep in ("/", "\\", os.sep))
           or getattr(config, name) in ("", ".", "..")}
    return bad


def one_line(message: str) -> str:
    """An error's message without the worker traceback a DataLoader puts into what it re-raises.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    if "Traceback (most recent call last)" in message:
        return message.strip().splitlines()[-1]
    return message


#: Set by ``python -m common.ddp.torchrun`` for the ranks it starts: a rank's error line goes to
#: the launcher (torchelastic's error file, ``TORCHELASTIC_ERROR_FILE``), which prints each
#: distinct line once for the whole job, instead of every rank printing its own.
LAUNCHER_PRINTS_ERRORS = "COMPANION_LAUNCHER_PRINTS_ERRORS"


def error_line(line: str) -> None:
    """Say a process's one-line error: on stderr, or to ``common.ddp.torchrun`` (see
    ``LAUNCHER_PRINTS_ERRORS``), which prints it once for all the ranks that say the same.

    Introduced in docs/scripts.md ("Your own images").
    """
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file and os.environ.get(LAUNCHER_PRINTS_ERRORS) == "1":
        try:
            Path(error_file).parent.mkdir(parents=True, exist_ok=True)
            Path(error_file).write_text(json.dumps({"message": line,
                                                    "timestamp": int(time.time())}))
            return
        except OSError:
            pass  # printed here instead
    print(line, file=sys.stderr, flush=True)


def fail(message: str, *, prog: str = "") -> int:
    """Print ``prog: error: message`` on one line to stderr; the exit status 1 of a ``main``.

    For errors found after parsing (a file's content, the data's labels), which argparse
    cannot see: a user's mistake gets one line naming the flag or file, never a traceback
    (not even the worker's traceback that a DataLoader puts into the message it re-raises).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    name = prog or Path(sys.argv[0]).name
    message = one_line(message)  # a DataLoader worker's traceback, re-raised, is cut to its last line
    error_line(f"{name}: error: {message}")
    return 1
