"""Grade submitted exercise notebooks: ``python -m course.grading --submissions DIR --out DIR``.

Submissions are ``DIR/<student>/**/<exNN_name>.ipynb`` (nbgrader's ``submitted/<student>/
<assignment>/`` layout works too). Only a submission's answer cells are used, matched by
``grade_id``; everything else, the visible and hidden checks included, comes from the
instructor source. A submission that is a symbolic or hard link is refused, not followed.

Threat model: a student may hand in any code, written to raise their own or anyone's score.

- *Who runs what.* The grader never runs student code. It starts a judge (``course.judge``)
  in a fresh working copy and feeds it the instructor's setup cells; the judge runs only
  those. For each exercise it forks a checker and an answer process (``course.checker``):
  the answer process runs the answer cells (refused unless their top level is only imports,
  ``def``, ``class`` and constants) in plain Python (no IPython: input and AST transformers do
  not exist) and serves calls; the checker runs the check cell, in which the answer's names
  are handles whose calls come back as data only (``course.remote``, ``course.channel``).
  The checker reports JSON through a pipe of its own, and the grader keeps only the fields it
  knows. So an answer earns its own exercise's points by the data it returns and nothing
  else: it can never raise another exercise's or another student's score.
- *The sandbox* (bubblewrap, where it works): the machine read-only, the repository hidden
  except ``common/`` and ``course/`` (no ``.git``, ``tests/``, exercise sources), the
  submissions and the report hidden, no network, its own PID namespace (everything ends with
  it), the working copy writable and holding no checks. As root, each judge runs under a uid
  of its own. Each exercise has limits on memory, CPU time, processes, open files and file
  size, and a wall-clock limit; hitting one scores zero with a message saying which.
- *Without bubblewrap* the grader says loudly that it is unsafe for untrusted submissions,
  and still: refuses links, keeps the report in memory until every submission's processes
  are dead (the judge is a child subreaper; as root all processes of its uid are killed),
  survives a killed judge (the exercises after the culprit are graded by a new one), and
  hashes the repository (new files included) after every exercise: a change zeroes that
  exercise, is undone, and is recorded in ``integrity``.

Writes ``grades.csv`` and ``grades.json`` (student, exercise, points, max_points, message;
``grades.json`` adds totals, the sandbox mode and structured ``integrity`` records) and
feedback notebooks under ``feedback/<student>/``: the student's answers and, under each check
cell (hidden checks removed), the check's name, points and message.
"""

from __future__ import annotations

import csv
import json
import os
import site
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

from common.cli import option, parse_config
from common.paths import repo_root
from course.assignments import STUB, Exercise, exercises_of, instructor_sources, strip_hidden_tests
from course.judge import answer_problems
from course.judging import Run, may_drop, run_notebook
from course.sandbox import FileGuard, choose_sandbox

MAX_MESSAGE = 400


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
    cell_timeout: float = option(60.0, "seconds per exercise (answer and checks)")
    sandbox: str = option("auto", "bwrap: bubblewrap sandbox; none: unsandboxed; auto: bwrap if "
                          "available", choices=("auto", "bwrap", "none"))
    memory_mb: int = option(2048, "memory an exercise may add, MiB")
    cpu_seconds: int = option(120, "CPU seconds per process of an exercise")
    processes: int = option(64, "processes an exercise may run at once")
    open_files: int = option(256, "open files per process")
    file_mb: int = option(64, "largest file (and output) an exercise may write, MiB")

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
class Integrity:
    """A change to the instructor's files (or the checker) that a submission made; undone.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """

    student: str
    exercise: str
    kind: str  # "files" (changed, created or deleted; undone) or "checker" (rebound references)
    details: list[str]


def find_submissions(config: GradingConfig, names: list[str]) -> list[tuple[str, str, Path | None]]:
    """``(student, notebook, path)`` per student folder and notebook; path None if missing.

    Symbolic links are listed (and refused when read), never followed.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    found = []
    for folder in sorted(p for p in Path(config.submissions).iterdir() if p.is_dir()):
        candidates = [Path(d) / n for d, _, files in os.walk(folder) for n in files
                      if n.endswith(".ipynb") and ".ipynb_checkpoints" not in Path(d).parts]
        paths = {p.stem: p for p in sorted(candidates, reverse=True) if p.stem in names}
        wanted = config.notebooks or tuple(sorted(paths))
        found += [(folder.name, name, paths.get(name)) for name in wanted]
    return found


def read_submission(path: Path, folder: Path) -> nbformat.NotebookNode:
    """Read a submitted notebook without following links: a symbolic or hard link is refused.

    Raises:
        ValueError: Naming the link.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    for part in [path, *path.parents]:
        if part == folder.parent:
            break
        if part.is_symlink():
            raise ValueError(f"{part.name} is a symbolic link: hand in the file itself")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(handle.fileno()).st_nlink > 1:
            raise ValueError(f"{path.name} is a hard link: hand in a copy of the file")
        return nbformat.reads(handle.read(50 * 2**20).decode("utf-8"), as_version=4)


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


def _requests(nb: nbformat.NotebookNode, exercises: list[Exercise], refused: dict[str, str]) -> list[dict]:
    """The judge's requests in notebook order: setup cells, and one per exercise at its check cell."""
    by_tests = {e.tests_cell: e for e in exercises}
    answers = {e.answer_cell for e in exercises}
    requests = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or index in answers:
            continue
        exercise = by_tests.get(index)
        if exercise is None:
            requests.append({"op": "setup", "index": index, "code": cell.source})
        elif exercise.key not in refused:
            requests.append({"op": "exercise", "key": exercise.key, "check": cell.source,
                             "answer": nb.cells[exercise.answer_cell].source})
    return requests


def _score(exercise: Exercise, run: Run, refused: dict[str, str], missing: set[str]) -> tuple[float, str]:
    if exercise.key in missing:
        return 0.0, f"the answer cell '{exercise.key}-answer' is missing from the submission"
    if exercise.key in refused:
        return 0.0, f"answer cell: {refused[exercise.key]}"
    if exercise.key in run.changes:
        return 0.0, ("changed files outside its working copy (undone): "
                     + "; ".join(run.changes[exercise.key]))[:MAX_MESSAGE]
    reply = run.replies.get(exercise.key)
    if reply is None:
        why = run.fatal.get(exercise.key) or next(iter(run.fatal.values()), "the notebook stopped earlier")
        setup = "; ".join(run.setup_errors.values())
        return 0.0, f"not run: {why}" + (f" (setup: {setup})" if setup else "")
    if reply.get("fatal"):
        return 0.0, str(reply["fatal"])[:MAX_MESSAGE]
    if reply.get("tampered"):
        return 0.0, ("tampered with the checker or its files ("
                     + ", ".join(map(str, reply["tampered"])) + ")")[:MAX_MESSAGE]
    answer_error = reply.get("answer_error")
    check_error = reply.get("check_error")
    answer_error = str(answer_error)[:MAX_MESSAGE] if answer_error else None
    check_error = str(check_error)[:MAX_MESSAGE] if check_error else None
    if check_error is None:
        return exercise.points, "passed" + (f" (answer cell: {answer_error})" if answer_error else "")
    if check_error.startswith("NotImplementedError") or (answer_error or "").startswith("NotImplementedError"):
        return 0.0, "not attempted (NotImplementedError)"
    prefix = f"answer cell: {answer_error}; " if answer_error else ""
    return 0.0, f"{prefix}check failed: {check_error}"


def grade_notebook(student: str, source_path: Path, submission_path: Path | None, config: GradingConfig,
                   sandbox: str, guard: FileGuard | None) -> tuple[list[Result], list[Integrity]]:
    """Grade one submitted notebook; never raises for anything the submission does.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    source = nbformat.read(source_path, as_version=4)
    exercises = exercises_of(source, name=source_path.name)
    notebook = source_path.stem
    if submission_path is None:
        return zero_rows(student, notebook, exercises, "not submitted"), []
    try:
        submission = read_submission(submission_path, Path(config.submissions) / student)
    except (OSError, ValueError, KeyError, TypeError) as error:  # nbformat raises several kinds
        return zero_rows(student, notebook, exercises, f"cannot read the notebook: {error}"[:MAX_MESSAGE]), []
    nb, missing = graded_notebook(source, submission, exercises)
    refused = {e.key: why for e in exercises if e.key not in missing
               and (why := answer_problems(nb.cells[e.answer_cell].source))}
    run = run_notebook(_requests(nb, exercises, refused | {k: "" for k in missing}), student,
                        config, sandbox, guard)
    results, integrity = [], []
    for exercise in exercises:
        points, message = _score(exercise, run, refused, missing)
        results.append(Result(student, f"{notebook}/{exercise.key}", points, exercise.points, message))
        reply = run.replies.get(exercise.key) or {}
        if reply.get("tampered"):
            integrity.append(Integrity(student, f"{notebook}/{exercise.key}", "checker",
                                       [str(t) for t in reply["tampered"]]))
    for key, changes in run.changes.items():
        integrity.append(Integrity(student, f"{notebook}/{key}", "files", changes))
    if "(setup)" in run.changes:  # changed while an instructor cell ran: reported, worth nothing
        message = "changed files outside its working copy (undone): " + "; ".join(run.changes["(setup)"])
        results.append(Result(student, f"{notebook}/(setup)", 0.0, 0.0, message[:MAX_MESSAGE]))
    _write_feedback(nb, exercises, results, config.out / "feedback" / student / source_path.name)
    return results, integrity


def zero_rows(student: str, notebook: str, exercises: list[Exercise], message: str) -> list[Result]:
    """Zero points for every exercise of a notebook, with one message.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    return [Result(student, f"{notebook}/{e.key}", 0.0, e.points, message) for e in exercises]


def _write_feedback(nb: nbformat.NotebookNode, exercises: list[Exercise], results: list[Result],
                    path: Path) -> None:
    """The answers, and under each check cell (hidden checks removed) its name, points and message."""
    rows = {r.exercise.rsplit("/", 1)[1]: r for r in results}
    for exercise in exercises:
        cell, row = nb.cells[exercise.tests_cell], rows[exercise.key]
        cell.source = strip_hidden_tests(cell.source)
        text = f"{exercise.key}: {row.points:g} / {row.max_points:g} points: {row.message}\n"
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
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


def _guard(config: GradingConfig) -> FileGuard:
    """Every file of the repository (new ones too), the submissions, and what Python imports at start."""
    roots = [(config.repo, ("*",)), (config.repo / ".git" / "hooks", ("*",)), (config.repo / ".git", ("config",), 0),
             (config.submissions, ("*",))]
    roots += [(config.sources, ("*",))] if not config.sources.resolve().is_relative_to(config.repo.resolve()) else []
    roots += [(Path(p), ("*.py", "*.pth"), 0) for p in site.getsitepackages() if Path(p).is_dir()]
    return FileGuard(roots, skip=(config.out,))


def grade(config: GradingConfig) -> tuple[list[Result], dict]:
    """Grade every submission under ``config.submissions``; returns the rows and run info.

    Introduced in chapters/exercises/ex01_pytorch_basics.ipynb.
    """
    sources = {p.stem: p for p in instructor_sources(config.sources)}
    unknown = set(config.notebooks) - set(sources)
    if unknown:
        raise ValueError(f"no instructor source for {sorted(unknown)} in {config.sources}")
    sandbox, why = choose_sandbox(config.sandbox)
    if sandbox != "bwrap":
        print(f"WARNING: {why}", file=sys.stderr, flush=True)
    # Under bubblewrap the repository and site-packages are read-only to the student: a change
    # there comes from outside (a maintainer's edit) and must be neither blamed nor undone.
    guard = _guard(config) if sandbox != "bwrap" else None
    results: list[Result] = []
    integrity: list[Integrity] = []
    for student, name, path in find_submissions(config, list(sources)):
        print(f"grading {student}/{name} ...", flush=True)
        try:
            rows, problems = grade_notebook(student, sources[name], path, config, sandbox, guard)
        except Exception as error:  # noqa: BLE001 - one broken submission must not stop the rest
            exercises = exercises_of(nbformat.read(sources[name], as_version=4), name=name)
            rows, problems = zero_rows(student, name, exercises, f"grader error: {type(error).__name__}: "
                                       f"{error}"[:MAX_MESSAGE]), []
        results += rows
        integrity += problems
    uid_note = "" if os.geteuid() != 0 or may_drop(config, sandbox) else \
        " (root, but the judges run as root: make the repository and Python readable by others)"
    info = {"sandbox": sandbox, "sandbox_note": why + uid_note,
            "integrity": [asdict(problem) for problem in integrity]}
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
    for problem in info["integrity"]:
        print(f"WARNING {problem['student']} {problem['exercise']}: {problem['kind']}: "
              + "; ".join(problem["details"]), file=sys.stderr)
    totals = json.loads((config.out / "grades.json").read_text())["totals"]
    for student, total in totals.items():
        print(f"{student}: {total['points']:g} / {total['max_points']:g}")
    print(f"report: {config.out / 'grades.csv'} and grades.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
