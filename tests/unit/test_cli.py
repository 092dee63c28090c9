"""Tests for common/cli.py, and `--help` of every entry point the code defines."""

from __future__ import annotations

import importlib
import runpy
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.cli import non_negative, option, parse_dataclass_args, positive
from tests.unit.layout import console_script_targets, has_main_guard

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
    return parse_dataclass_args(Demo, argv, description="demo", presets=PRESETS,
                                validate=lambda c: {**positive(c, "num_epochs"),
                                                    **non_negative(c, "lr")})


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


def test_help_says_each_default_once_and_a_path_as_written(capsys):
    from dataclasses import dataclass
    from pathlib import Path

    from common.cli import build_parser, option

    @dataclass
    class Bench:
        out: Path = option(Path("build/bench"), "output folder")
        data: Path | None = option(None, "a dataset (default: the repository's data)")

    build_parser(Bench, description="x").print_help()
    out = " ".join(capsys.readouterr().out.split())
    assert "output folder (default: build/bench)" in out and "PosixPath" not in out
    assert "(default: the repository's data)" in out and "(default: None)" not in out


#: Where entry points live; a module is one if it has a ``__main__`` guard or is a ``__main__.py``.
ENTRY_FOLDERS = ("common", "course", "data_scripts")
#: Entry points that another program starts: their ``--help`` says who, on stderr, with exit status 2.
INTERNAL = {"course.grading.inside.judge": "grader",
            "common.ddp.first_step_rank": "common.ddp.first_step --libraries-first",
            "common.ddp.store_join_rank": "common.ddp.store_join"}


def _module(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] in ("__init__", "__main__") else parts)


def entry_points(root: Path = REPO) -> list[list[str]]:
    """Every command line the code defines: ``["-m", module]``, ``[script path]`` (data_scripts/,
    which is no package) and ``["console", name, "module:function"]`` for ``[project.scripts]``."""
    found = set()
    for folder in ENTRY_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if path.name != "__main__.py" and not has_main_guard(path):
                continue
            if (root / folder / "__init__.py").is_file():
                found.add(("-m", _module(path, root)))
            else:
                found.add((path.relative_to(root).as_posix(),))
    found |= {("console", name, target) for name, target in
              console_script_targets(root / "pyproject.toml").items()}
    return [list(entry) for entry in sorted(found)]


def test_entry_points_are_found_in_the_code():
    named = {" ".join(e) for e in entry_points()}
    for expected in ("-m common.ddp.train", "-m common.tools.doctor", "-m course.grading", "-m common.diagrams",
                     "-m common.fast.benchmark", "data_scripts/make_synthetic_data.py",
                     "console companion-make-data common.tools.make_data:main"):
        assert expected in named


def test_the_finder_sees_guards_main_packages_and_console_scripts(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[project.scripts]\nx-run = "common.a:main"\n')
    (tmp_path / "common" / "tool").mkdir(parents=True)
    (tmp_path / "data_scripts").mkdir()
    for name, text in (("common/__init__.py", ""), ("common/a.py", 'if __name__ == "__main__":\n    main()\n'),
                       ("common/b.py", "def main():\n    pass\n"), ("common/tool/__init__.py", ""),
                       ("common/tool/__main__.py", "main()\n"),
                       ("data_scripts/gen.py", "if __name__ == '__main__':\n    main()\n")):
        (tmp_path / name).write_text(text)
    assert entry_points(tmp_path) == [["-m", "common.a"], ["-m", "common.tool"],
                                      ["console", "x-run", "common.a:main"], ["data_scripts/gen.py"]]


def test_the_scripts_page_names_every_entry_point():
    page = (REPO / "docs" / "scripts.md").read_text(encoding="utf-8")
    for entry in entry_points():
        named = f"`{entry[1]}`" if entry[0] == "console" else "python " + " ".join(entry)
        assert named in page, f"docs/scripts.md does not name {named}"


def _help_in_process(entry: list[str], monkeypatch, capsys) -> str:
    """``python <entry> --help`` run by runpy in this process, as ``python -m`` / a script would.

    The same code path as a subprocess (``__name__ == "__main__"``, ``sys.argv``), without
    starting an interpreter and importing torch again for each of the ~15 entry points.
    """
    target = entry[1] if entry[0] == "console" else entry[-1]
    monkeypatch.setattr(sys, "argv", [target, "--help"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exit_info:
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: "found in sys.modules ..."
        # torchrun's error handler wants stderr's file descriptor; capsys has none
        warnings.filterwarnings("ignore", "Unable to enable fault handler", UserWarning)
        if entry[0] == "console":  # what the installed wrapper does: sys.exit(function())
            module, function = entry[2].split(":")
            raise SystemExit(getattr(importlib.import_module(module), function)())
        if entry[0] == "-m":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(str(REPO / target), run_name="__main__")
    out, err = capsys.readouterr()
    if target in INTERNAL:
        assert exit_info.value.code == 2 and err.startswith("usage:") and INTERNAL[target] in err, err
        return err
    assert exit_info.value.code in (0, None), out
    return out


@pytest.mark.parametrize("entry", entry_points(), ids=" ".join)
def test_every_entry_point_has_help(entry, monkeypatch, capsys):
    out = _help_in_process(entry, monkeypatch, capsys)
    if entry[-1] not in INTERNAL:
        assert out.startswith("usage:") and "-h, --help" in out
