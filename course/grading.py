"""Grade submitted exercise notebooks: ``python -m course.grading --submissions DIR --out DIR``.

Submissions are ``DIR/<student>/**/<exNN_name>.ipynb`` (nbgrader's ``submitted/<student>/
<assignment>/`` layout works too). Each one is graded without trusting anything but its
answer cells: the graded notebook is the instructor source with the submission's answer
cells put in by ``grade_id``, so the check cells, hidden checks included, always come from
the instructor. It runs in a fresh kernel inside its own temporary working copy, under
bubblewrap when that works here (the whole machine read-only, only the working copy
writable, the instructor sources, submissions and report folders hidden), with a
per-cell and a per-notebook time limit. An exercise earns its points when its check cell
runs without an error. A cell that times out or kills the kernel scores zero for its
exercise, and the notebook is run again with that answer left out, so the other
exercises are still graded. After every cell the instructor's files and the submissions
are hashed; a change zeroes the exercise that made it, is reported and is undone. The
sandbox and the file guard live in ``course.sandbox``.

Writes ``grades.csv`` and ``grades.json`` (student, exercise, points, max_points, message)
and the executed notebooks under ``feedback/<student>/``.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from common.cli import option, parse_config
from common.paths import repo_root
from course.assignments import STUB, Exercise, exercises_of, instructor_sources
from course.sandbox import FileGuard, PrefixedKernelManager, bwrap_prefix, choose_sandbox

MAX_MESSAGE, MAX_OUTPUT = 400, 5_000


@dataclass
class GradingConfig:
    """What to grade and how strictly. The command line is built from these fields.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """

    submissions: Path = option(None, "folder with one sub-folder per student")
    out: Path = option(Path("build/grades"), "report folder (grades.csv, grades.json, feedback/)")
    sources: Path | None = option(None, "instructor sources (default: chapters/exercises)")
    repo: Path | None = option(None, "the repository checkout (default: found from here)")
    notebooks: tuple[str, ...] = option((), "grade only these (e.g. ex01_pytorch_basics); missing "
                                        "ones score 0", nargs="*")
    timeout: float = option(300.0, "seconds per notebook")
    cell_timeout: float = option(60.0, "seconds per cell")
    sandbox: str = option("auto", "bwrap: bubblewrap sandbox; none: unsandboxed; auto: bwrap if "
                          "available", choices=("auto", "bwrap", "none"))

    def __post_init__(self) -> None:
        self.repo = Path(self.repo) if self.repo else repo_root()
        self.sources = Path(self.sources) if self.sources else self.repo / "chapters" / "exercises"


@dataclass
class Result:
    """One row of the report.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """

    student: str
    exercise: str
    points: float
    max_points: float
    message: str


@dataclass
class _Run:
    """What one execution of a graded notebook produced."""

    errors: dict[int, str] = field(default_factory=dict)
    ran: set[int] = field(default_factory=set)
    tampered: dict[int, list[str]] = field(default_factory=dict)
    fatal: tuple[int, str] | None = None


def find_submissions(config: GradingConfig, names: list[str]) -> list[tuple[str, str, Path | None]]:
    """``(student, notebook, path)`` per student folder and notebook; path None if missing.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    found = []
    for folder in sorted(p for p in Path(config.submissions).iterdir() if p.is_dir()):
        paths = {p.stem: p for p in sorted(folder.rglob("*.ipynb"), reverse=True)
                 if p.stem in names and ".ipynb_checkpoints" not in p.parts}
        wanted = config.notebooks or tuple(sorted(paths))
        found += [(folder.name, name, paths.get(name)) for name in wanted]
    return found


def graded_notebook(source: nbformat.NotebookNode, submission: nbformat.NotebookNode,
                    exercises: list[Exercise]) -> tuple[nbformat.NotebookNode, set[str]]:
    """The instructor source with the submission's answer cells; also the keys missing.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    answers: dict[str, str] = {}
    for cell in submission.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if isinstance(grade_id, str) and grade_id.endswith("-answer"):
            answers.setdefault(grade_id, cell.source if isinstance(cell.source, str) else "")
    graded = nbformat.from_dict(json.loads(json.dumps(source)))
    for cell in graded.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    missing = set()
    for exercise in exercises:
        text = answers.get(f"{exercise.key}-answer")
        if text is None:
            missing.add(exercise.key)
            text = STUB
        graded.cells[exercise.answer_cell].source = text
    return graded, missing


def _describe(error: Exception) -> str:
    if isinstance(error, CellExecutionError):
        text = f"{error.ename}: {error.evalue}".strip().rstrip(":")
    else:
        text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " ..."


def _execute(nb: nbformat.NotebookNode, workdir: Path, prefix: list[str], env: dict[str, str],
             guard: FileGuard, config: GradingConfig, exercise_cells: set[int]) -> _Run:
    """Run every cell in a fresh kernel; stop at a timeout or a dead kernel."""
    run, deadline = _Run(), time.monotonic() + config.timeout
    km = PrefixedKernelManager(kernel_name="python3", prefix=prefix)
    client = NotebookClient(nb, km=km, kernel_name="python3", timeout=int(config.cell_timeout),
                            shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(workdir)}})
    try:
        with client.setup_kernel(env=env, stdout=subprocess.DEVNULL, cleanup_kc=True):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    run.fatal = (index, f"the notebook ran out of time ({config.timeout:g} s)")
                    break
                # Student code runs in exercise cells; the instructor's setup cells (imports)
                # only have the notebook's limit, so a slow import is not a student's failure.
                limit = config.cell_timeout if index in exercise_cells else left
                client.timeout = max(1, int(min(limit, left)))
                try:
                    client.execute_cell(cell, index)
                except CellExecutionError as error:
                    run.errors[index] = _describe(error)
                except (CellTimeoutError, TimeoutError):
                    run.fatal = (index, f"timed out after {client.timeout} s")
                except DeadKernelError as error:
                    run.fatal = (index, f"the kernel died ({_describe(error)})")
                run.ran.add(index)
                changes = guard.changes()
                if changes:
                    run.tampered[index] = changes
                    guard.restore()
                if run.fatal:
                    break
    finally:
        if km.has_kernel:  # nbclient normally shut it down already
            run_sync(km.shutdown_kernel)(now=True)
    return run


def _owner(index: int, exercises: list[Exercise]) -> Exercise | None:
    return next((e for e in exercises if index in (e.answer_cell, e.tests_cell)), None)


def _score(exercise: Exercise, run: _Run, notes: dict[str, str], missing: set[str],
           tampered: list[str]) -> tuple[float, str]:
    if exercise.key in notes:
        return 0.0, notes[exercise.key]
    if tampered:
        return 0.0, "changed files outside its working copy (undone): " + "; ".join(tampered)[:MAX_MESSAGE]
    if exercise.key in missing:
        return 0.0, f"the answer cell '{exercise.key}-answer' is missing from the submission"
    if exercise.tests_cell not in run.ran:
        return 0.0, "not run: " + (run.fatal[1] if run.fatal else "the notebook stopped earlier")
    answer_error = run.errors.get(exercise.answer_cell)
    check_error = run.errors.get(exercise.tests_cell)
    if check_error is None:
        return exercise.points, "passed" + (f" (answer cell: {answer_error})" if answer_error else "")
    if check_error.startswith("NotImplementedError"):
        return 0.0, "not attempted (NotImplementedError)"
    prefix = f"answer cell: {answer_error}; " if answer_error else ""
    return 0.0, f"{prefix}check failed: {check_error}"


def grade_notebook(student: str, source_path: Path, submission_path: Path | None,
                   config: GradingConfig, sandbox: str, guard: FileGuard) -> list[Result]:
    """Grade one submitted notebook; never raises for anything the submission does.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    source = nbformat.read(source_path, as_version=4)
    exercises = exercises_of(source, name=source_path.name)

    if submission_path is None:
        return zero_rows(student, source_path.stem, exercises, "not submitted")
    try:
        submission = nbformat.read(submission_path, as_version=4)
    except (OSError, ValueError, KeyError, TypeError) as error:  # nbformat raises several kinds
        return zero_rows(student, source_path.stem, exercises,
                         f"cannot read the notebook: {_describe(error)}")
    nb, missing = graded_notebook(source, submission, exercises)
    notes: dict[str, str] = {}
    cells = {i for e in exercises for i in (e.answer_cell, e.tests_cell)}
    tampered: dict[str, list[str]] = {}  # exercise key (or "(setup)") -> changes, all attempts
    for _attempt in range(len(exercises) + 1):
        with tempfile.TemporaryDirectory(prefix=f"grade-{student}-") as tmp:
            run = _attempt_run(nb, Path(tmp), source_path.name, config, sandbox, guard, cells)
        for index, changes in run.tampered.items():
            owner = _owner(index, exercises)
            tampered.setdefault(owner.key if owner else "(setup)", []).extend(changes)
        if run.fatal is None:
            break
        index, why = run.fatal
        owner = _owner(index, exercises)
        if owner is None or owner.key in notes:
            break
        notes[owner.key] = why
        nb.cells[owner.answer_cell].source = STUB  # leave that answer out and run again
    _write_feedback(nb, config.out / "feedback" / student / source_path.name)
    results = []
    for exercise in exercises:
        points, message = _score(exercise, run, notes, missing, tampered.get(exercise.key, []))
        results.append(Result(student, f"{source_path.stem}/{exercise.key}", points,
                              exercise.points, message))
    if "(setup)" in tampered:  # changed while an instructor cell ran: reported, worth nothing
        message = "changed files outside its working copy (undone): " + "; ".join(tampered["(setup)"])
        results.append(Result(student, f"{source_path.stem}/(setup)", 0.0, 0.0, message[:MAX_MESSAGE]))
    return results


def zero_rows(student: str, notebook: str, exercises: list[Exercise], message: str) -> list[Result]:
    """Zero points for every exercise of a notebook, with one message.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    return [Result(student, f"{notebook}/{e.key}", 0.0, e.points, message) for e in exercises]


def _attempt_run(nb: nbformat.NotebookNode, tmp: Path, name: str, config: GradingConfig,
                 sandbox: str, guard: FileGuard, exercise_cells: set[int]) -> _Run:
    workdir = tmp / "work"
    for sub in ("home", "tmp", "data"):
        (workdir / sub).mkdir(parents=True)
    nbformat.write(nb, workdir / name)  # the working copy
    env = {**os.environ, "HOME": str(workdir / "home"), "TMPDIR": str(workdir / "tmp"),
           "COMPANION_DATA": str(workdir / "data"), "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(config.repo), os.environ.get("PYTHONPATH", "")])}
    prefix: list[str] = []
    if sandbox == "bwrap":
        keep = [config.repo.resolve(), Path(sys.prefix).resolve(), workdir.resolve()]
        hidden = [p.resolve() for p in (config.sources, config.submissions, config.out)]
        hidden = [p for p in hidden if p.is_dir() and not any(k.is_relative_to(p) for k in keep)]
        prefix = bwrap_prefix(workdir, hidden)
    return _execute(nb, workdir, prefix, env, guard, config, exercise_cells)


def _write_feedback(nb: nbformat.NotebookNode, path: Path) -> None:
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if isinstance(output.get("text"), str) and len(output["text"]) > MAX_OUTPUT:
                output["text"] = output["text"][:MAX_OUTPUT] + "\n... (output cut)"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def write_report(results: list[Result], out: Path, info: dict) -> None:
    """Write ``grades.csv`` and ``grades.json`` (rows, totals per student, sandbox, integrity).

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Result.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(r) for r in results)
    totals: dict[str, dict[str, float]] = {}
    for r in results:
        total = totals.setdefault(r.student, {"points": 0.0, "max_points": 0.0})
        total["points"] += r.points
        total["max_points"] += r.max_points
    report = {**info, "totals": totals, "results": [asdict(r) for r in results]}
    (out / "grades.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))


def grade(config: GradingConfig) -> tuple[list[Result], dict]:
    """Grade every submission under ``config.submissions``; returns the rows and run info.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    sources = {p.stem: p for p in instructor_sources(config.sources)}
    unknown = set(config.notebooks) - set(sources)
    if unknown:
        raise ValueError(f"no instructor source for {sorted(unknown)} in {config.sources}")
    sandbox, why = choose_sandbox(config.sandbox)
    guard = FileGuard([(config.repo / "common", ("*.py",)), (config.repo / "course", ("*.py",)),
                       (config.sources, ("*.py", "*.ipynb")), (config.submissions, ("*.ipynb",))])
    results: list[Result] = []
    for student, name, path in find_submissions(config, list(sources)):
        print(f"grading {student}/{name} ...", flush=True)
        try:
            results += grade_notebook(student, sources[name], path, config, sandbox, guard)
        except Exception as error:  # noqa: BLE001 - one broken submission must not stop the rest
            exercises = exercises_of(nbformat.read(sources[name], as_version=4), name=name)
            results += zero_rows(student, name, exercises, f"grader error: {_describe(error)}")
    info = {"sandbox": sandbox, "sandbox_note": why, "integrity": [
        f"{r.student} {r.exercise}: {r.message}" for r in results
        if r.message.startswith("changed files")]}
    return results, info


def _check(config: GradingConfig) -> dict[str, str]:
    if config.submissions is None or not Path(config.submissions).is_dir():
        return {"submissions": f"{config.submissions} is not a folder (one sub-folder per student)"}
    return {}


def main(argv: list[str] | None = None) -> int:
    config = parse_config(GradingConfig, argv, description=__doc__.splitlines()[0],
                          validate=_check)
    config.submissions, config.out = config.submissions.resolve(), config.out.resolve()
    config.sources = config.sources.resolve()
    results, info = grade(config)
    write_report(results, config.out, info)
    print(f"sandbox: {info['sandbox_note']}")
    for line in info["integrity"]:
        print(f"WARNING {line}", file=sys.stderr)
    totals = json.loads((config.out / "grades.json").read_text())["totals"]
    for student, total in totals.items():
        print(f"{student}: {total['points']:g} / {total['max_points']:g}")
    print(f"report: {config.out / 'grades.csv'} and grades.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
