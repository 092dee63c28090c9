"""Command lines built from configuration dataclasses: one rule for every entry point.

Each field of a ``@dataclass`` becomes a flag (``batch_size`` -> ``--batch-size``) whose help
comes from ``option(..., help=...)``. A *preset* (``--tiny`` for tests, ``--quick`` for a short
benchmark) fills in its values only where no flag was given: **flags given always win**.

    @dataclass
    class Config:
        lr: float = option(3e-3, "peak learning rate")
        tiny: bool = option(False, "a configuration small enough for tests")

    config = parse_config(Config, argv, description="...", presets={"tiny": {"lr": 0.05}})

Every ``main`` returns an exit code and modules end with ``raise SystemExit(main())``.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def option(default: Any, help: str, *, choices: Sequence[Any] | None = None,  # noqa: A002
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
    text += f" (default: {default!r})" if item.default is not dataclasses.MISSING else " (required)"
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


def parse_config(config_cls: type[T], argv: Sequence[str] | None = None, *, description: str,
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


def positive(config: Any, *names: str) -> dict[str, str]:
    """``{name: "must be at least 1, got 0"}`` for each named field below 1 (for ``validate``).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {name: f"must be at least 1, got {getattr(config, name)}"
            for name in names if getattr(config, name) < 1}


def non_negative(config: Any, *names: str) -> dict[str, str]:
    """``{name: "must be 0 or more, got -3"}`` for each named field below 0 (for ``validate``).

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return {name: f"must be 0 or more, got {getattr(config, name)}"
            for name in names if getattr(config, name) < 0}

