"""Tests for common/cli.py, and `--help` of every entry point the README or Makefile names."""

from __future__ import annotations

import re
import runpy
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.cli import non_negative, option, parse_config, positive

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Demo:
    lr: float = option(0.1, "peak rate, in % of nothing")
    num_epochs: int = option(3, "epochs")
    augment: bool = option(True, "augment")
    sizes: tuple[int, ...] = option((1, 2), "sizes", nargs="+")
    mode: str = option("a", "mode", choices=("a", "b"))
    tiny: bool = option(False, "tiny")


PRESETS = {"tiny": {"num_epochs": 1, "lr": 0.5}}


def _parse(*argv: str) -> Demo:
    return parse_config(Demo, argv, description="demo", presets=PRESETS,
                        validate=lambda c: {**positive(c, "num_epochs"), **non_negative(c, "lr")})


def test_defaults_preset_and_flags_given_win():
    assert _parse() == Demo()
    assert (_parse("--tiny").num_epochs, _parse("--tiny").lr) == (1, 0.5)
    config = _parse("--tiny", "--num-epochs", "7")  # the given flag wins over the preset
    assert (config.num_epochs, config.lr, config.tiny) == (7, 0.5, True)
    assert _parse("--num-epochs", "7", "--tiny").num_epochs == 7  # whatever the order


def test_types_booleans_tuples_and_choices():
    config = _parse("--no-augment", "--sizes", "4", "5", "--mode", "b", "--lr", "0.25")
    assert (config.augment, config.sizes, config.mode, config.lr) == (False, (4, 5), "b", 0.25)
    with pytest.raises(SystemExit) as exit_info:
        _parse("--mode", "c")
    assert exit_info.value.code == 2


def test_invalid_values_are_argparse_errors_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _parse("--num-epochs", "0", "--lr", "-1")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--num-epochs: must be at least 1, got 0" in err and "--lr: must be 0 or more" in err


def test_help_shows_percent_and_defaults(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _parse("--help")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "in % of nothing (default: 0.1)" in out and "--no-augment" in out


def _entry_points() -> list[list[str]]:
    """Every `python -m ...` module and data script that the README or the Makefile names."""
    text = (REPO / "README.md").read_text() + (REPO / "Makefile").read_text()
    modules = sorted(set(re.findall(r"-m ((?:common|course)(?:\.[a-z_]+)+)", text)))
    scripts = sorted(set(re.findall(r"(data_scripts/[a-z_]+\.py)", text)))
    return [["-m", module] for module in modules] + [[script] for script in scripts]


def test_the_docs_name_the_main_entry_points():
    named = {" ".join(e) for e in _entry_points()}
    for expected in ("-m common.ddp.train", "-m common.doctor", "-m course.grading",
                     "-m common.fast.benchmark", "data_scripts/make_synthetic_data.py"):
        assert expected in named


def _help_in_process(entry: list[str], monkeypatch, capsys) -> str:
    """``python <entry> --help`` run by runpy in this process, as ``python -m`` / a script would.

    The same code path as a subprocess (``__name__ == "__main__"``, ``sys.argv``), without
    starting an interpreter and importing torch again for each of the ~15 entry points.
    """
    target = entry[-1]
    monkeypatch.setattr(sys, "argv", [target, "--help"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exit_info:
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: "found in sys.modules ..."
        if entry[0] == "-m":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(str(REPO / target), run_name="__main__")
    out = capsys.readouterr().out
    assert exit_info.value.code in (0, None), out
    return out


@pytest.mark.parametrize("entry", _entry_points(), ids=" ".join)
def test_every_entry_point_has_help(entry, monkeypatch, capsys):
    out = _help_in_process(entry, monkeypatch, capsys)
    assert out.startswith("usage:") and "-h, --help" in out
