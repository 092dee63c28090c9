"""The sizes ``make test`` gives each notebook, and the one rewrite that gives them.

Every size a test shrinks (epochs, images, steps, repeats) lives in one code cell of the notebook,
tagged ``parameters`` (papermill's convention), with the learner's values. The tests run the same
notebook with that cell's values replaced by the ones below, and change nothing else: the learner's
path is the tested path. ``tests/unit/test_notebook_parameters.py`` proves it, comparing the
rewritten sources with the committed ones.

The rewrite keeps the cell's text and comments and replaces the right-hand side of each named
top-level assignment; a name that the cell does not assign exactly once is refused.

A value may be a :class:`WrittenFolder`: a folder the tests write for the run (chapter 7's
``DATA_DIR``: a learner's messy folder), given to the notebook as its path.
"""

from __future__ import annotations

import ast
import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WrittenFolder:
    """A test value that is a folder: ``write(folder)`` fills it once per test process (outside
    the repository, removed when the process ends), and the notebook gets its path, a ``str``."""

    name: str
    write: Callable[[Path], object]

    def path(self) -> str:
        folder = Path(tempfile.gettempdir()) / f"companion-{self.name}-{os.getpid()}"
        if not folder.is_dir():
            partial = folder.with_name(f"{folder.name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            self.write(partial)
            partial.rename(folder)
            atexit.register(shutil.rmtree, folder, True)
        return str(folder)


def _messy_folder(folder: Path) -> None:
    from common.images.examples import write_messy_folder

    write_messy_folder(folder)

#: The tag of the cell that holds the sizes.
TAG = "parameters"

#: Test values per notebook, keyed by file stem (the same for the zh edition and both exercise copies).
TEST_PARAMETERS: dict[str, dict[str, object]] = {
    "02_1_dataset_dataloader": {"EPOCH_REPEATS": 1},
    "02_3_custom_datasets": {"NUM_EPOCHS": 3},
    # one epoch: the chapter checks equal batches per rank (2 epochs on 2 ranks: tests/system/test_shard_train.py)
    "05_sharded_datasets": {"NUM_EPOCHS": 1},
    "03_1_efficient_pipelines": {"EPOCH_REPEATS": 1, "KNOB_IMAGES": 32, "BENCH_IMAGES": 32, "BENCH_REPEATS": 1},
    "04_1_ddp_fundamentals": {"REPEATS": 3, "NUM_EPOCHS": 1},
    # NUM_EPOCHS 2: the chapter checks that the loss falls; BENCH_STEPS 3: 2 untimed steps and 1 timed
    "04_2_ddp_training": {"NUM_EPOCHS": 2, "BENCH_STEPS": 3, "BENCH_REPEATS": 1},
    "04_3_several_machines": {"SIZES_KIB": [256, 2048], "RATES_MBIT": [100, 1000], "REPEATS": 1, "HOSTS": [2],
                              "WAIT": 5, "HANG": 6},
    "06_1_fsdp_sharding": {"BENCH_STEPS": 4},
    "06_2_distributed_checkpoints": {"ASYNC_LAYERS": 2},
    # chapter 7 on a learner's folder: train/ and val/ of 3 classes with their junk (DATA_DIR)
    "07_your_data": {"DATA_DIR": WrittenFolder("messy-photos", _messy_folder), "SIZE": 16, "SUBSET": 128, "LOADER_ROUNDS": 1, "LOADER_IMAGES": 256,
                     "DDP_EPOCHS": 1, "FSDP_EPOCHS": 2, "CHECKPOINT_EVERY": 2, "KILL_AT": 5},
    "06_3_compile_and_resumable_loaders": {"REPEATS": 3, "TRAIN_STEPS": 6},
    # the student version run top to bottom (tests/unit/test_assignments.py's student_runs): the broken
    # FSDP script's demo fails on its resume from 1 process to 2 as from 2 to 3, with 2 processes fewer
    "ex06_fsdp_checkpoints": {"FIRST_RANKS": 1, "RESUMED_RANKS": 2},
}


def parameters_cells(cells: list) -> list[int]:
    """Indices of the code cells tagged ``parameters``."""
    return [i for i, cell in enumerate(cells) if cell.get("cell_type") == "code"
            and TAG in (cell.get("metadata", {}).get("tags") or [])]


def rewrite_source(source: str, values: dict[str, object], *, where: str = "the parameters cell") -> str:
    """``source`` with the right-hand side of each ``NAME = ...`` in ``values`` replaced by its repr."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    spans = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in spans:
                raise ValueError(f"{where}: {name} is assigned twice")
            spans[name] = node.value
    missing = sorted(set(values) - set(spans))
    if missing:
        raise ValueError(f"{where} assigns no {', '.join(missing)} (it has {', '.join(sorted(spans)) or 'none'})")
    # Replace from the last assignment up, so that earlier offsets stay valid.
    for name in sorted(values, key=lambda n: (spans[n].lineno, spans[n].col_offset), reverse=True):
        value = spans[name]
        start = _offset(lines, value.lineno, value.col_offset)
        end = _offset(lines, value.end_lineno, value.end_col_offset)
        source = source[:start] + repr(values[name]) + source[end:]
        lines = source.splitlines(keepends=True)
    return source


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """The character offset of (line, UTF-8 byte column) as ``ast`` reports them."""
    line = lines[lineno - 1]
    return sum(len(text) for text in lines[:lineno - 1]) + len(line.encode()[:col].decode())


def test_values(path: str | Path) -> dict[str, object]:
    """The test values of a notebook (an empty dict: the notebook runs as committed); a
    ``WrittenFolder`` is written here and given as its path."""
    return {name: value.path() if isinstance(value, WrittenFolder) else value
            for name, value in TEST_PARAMETERS.get(Path(path).stem, {}).items()}


def apply_parameters(nb, path: str | Path):
    """Rewrite ``nb``'s parameters cell (in place) with the test values of ``path``; return ``nb``."""
    values = test_values(path)
    found = parameters_cells(nb["cells"])
    if len(found) > 1:
        raise ValueError(f"{path}: {len(found)} cells are tagged {TAG!r}; one holds every size")
    if values and not found:
        raise ValueError(f"{path}: no code cell is tagged {TAG!r}, but tests give it {sorted(values)}")
    if values:
        cell = nb["cells"][found[0]]
        cell["source"] = rewrite_source(cell["source"], values, where=f"{path}'s parameters cell")
    return nb
