"""The grader: submissions in, judges shared by the submissions of every notebook, scores and the report out.

``python -m course.grading --submissions DIR --out DIR`` (``--help`` for the limits). Each
submission is read and turned into the judge's requests (``submission``: its answer cells put into
the instructor source, answers that would run code before the checks refused, answers left as
handed out only recorded); the requests are run by judges (``judges``) inside the sandbox, and
each reply becomes a row (``submission.score``); ``report`` writes the rows and returns the totals
``main`` prints. The threat model, with the six processes at their four trust levels and the one
request that goes up (the judge's ``place``, answered by ``judges``), is in ``course/grading/__init__.py``.
"""

from __future__ import annotations

import os
import site
import sys
from dataclasses import asdict
from pathlib import Path

import nbformat

from common.cli import (
    at_least,
    fail,
    finite,
    is_dir,
    is_dir_or_absent,
    parse_dataclass_args,
    positive,
)
from course.assignments import exercises_of, instructor_sources, sources_problem
from course.grading.cgroups import available
from course.grading.config import GradingConfig, Integrity, Result
from course.grading.inside.channel import MAX_MESSAGE
from course.grading.judges import Run, allow_list, may_drop, own_uids, run_notebook, run_notebooks
from course.grading.report import with_edition_markdown, worked_in, write_feedback, write_report
from course.grading.sandbox import FileGuard, choose_sandbox
from course.grading.submission import Prepared, prepare, score, zero_rows
from course.grading.text import shown
from course.grading.uids import Subordinate
from course.student.messages import notebook_language


class SandboxRequired(RuntimeError):
    """The sandbox does not work (or was turned off) and the input was not declared trusted."""


class CannotGrade(ValueError):
    """What the instructor asked cannot be graded here (a notebook without a source, a private folder
    the sandbox would show)."""


def find_submissions(config: GradingConfig, names: list[str]) -> list[tuple[str, str, Path | None]]:
    """``(student, notebook, path)`` per student folder and notebook; path None if missing.

    Symbolic links are listed (and refused when read), never followed.
    """
    found = []
    for folder in sorted(p for p in Path(config.submissions).iterdir() if p.is_dir()):
        candidates = [Path(d) / n for d, _, files in os.walk(folder) for n in files
                      if n.endswith(".ipynb") and ".ipynb_checkpoints" not in Path(d).parts]
        paths = {p.stem: p for p in sorted(candidates, reverse=True) if p.stem in names}
        wanted = config.notebooks or tuple(sorted(paths))
        found += [(folder.name, name, paths.get(name)) for name in wanted]
    return found


def finish(prepared: Prepared, run: Run, config: GradingConfig) -> tuple[list[Result], list[Integrity]]:
    """The rows and integrity records of one submitted notebook from its judges' run; writes its
    feedback."""
    student, source_path, nb, exercises = prepared.student, prepared.source_path, prepared.nb, prepared.exercises
    notebook = source_path.stem
    results, integrity = [], []
    for exercise in exercises:
        points, message = score(exercise, run, prepared.refused, prepared.missing, prepared.unattempted)
        opened = prepared.hints.get(exercise.key, 0)
        if config.hint_cost > 0 and opened and points > 0:  # only where the instructor asks for it
            taken = min(points, config.hint_cost * opened)
            points, message = points - taken, f"{message} ({opened} hint(s) opened: -{taken:g})"
        results.append(Result(student, f"{notebook}/{exercise.key}", points, exercise.points, message))
        reply = run.replies.get(exercise.key) or {}
        for kind, field in (("checker", "tampered"), ("rebound", "rebound")):
            if reply.get(field):
                integrity.append(Integrity(student, f"{notebook}/{exercise.key}", kind,
                                           [str(t) for t in reply[field]]))
    for key, changes in run.changes.items():
        integrity.append(Integrity(student, f"{notebook}/{key}", "files", changes))
    if "(setup)" in run.changes:  # changed while an instructor cell ran: reported, worth nothing
        message = "changed files outside its working copy (undone): " + "; ".join(run.changes["(setup)"])
        results.append(Result(student, f"{notebook}/(setup)", 0.0, 0.0, message[:MAX_MESSAGE]))
    try:  # the feedback is a courtesy: failing to write it costs no points
        language = notebook_language(prepared.language)
        # The markdown of the student version the student worked in (chapters/zh/exercises/... for zh).
        nb = with_edition_markdown(nb, worked_in(config.repo, source_path, language))
        write_feedback(nb, exercises, results, config.out / "feedback" / student / source_path.name, language)
    except (OSError, ValueError, TypeError) as error:
        print(f"WARNING: no feedback for {shown(student)}/{source_path.name}: {shown(error)}",
              file=sys.stderr, flush=True)
    return results, integrity


def grade_notebook(student: str, source_path: Path, submission_path: Path | None, config: GradingConfig,
                   sandbox: str, guard: FileGuard | None, subordinate: Subordinate | None = None
                   ) -> tuple[list[Result], list[Integrity]]:
    """Grade one submitted notebook on a judge of its own (an ordinary user's judges under
    ``subordinate`` uids where given); never raises for anything the submission does."""
    prepared = prepare(student, source_path, submission_path, config)
    if not isinstance(prepared, Prepared):
        return prepared, []
    run = run_notebook(prepared.requests, student, config, sandbox, guard, subordinate) \
        if prepared.needs_judge else Run()
    return finish(prepared, run, config)


def _grader_error(student: str, source_path: Path, error: Exception) -> list[Result]:
    exercises = exercises_of(nbformat.read(source_path, as_version=4), name=source_path.name)
    return zero_rows(student, source_path.stem, exercises,
                     f"grader error: {type(error).__name__}: {error}"[:MAX_MESSAGE])


def _finish_safely(prepared: Prepared, run: Run | Exception, config: GradingConfig
                   ) -> tuple[list[Result], list[Integrity]]:
    if isinstance(run, Exception):
        return _grader_error(prepared.student, prepared.source_path, run), []
    try:
        return finish(prepared, run, config)
    except Exception as error:  # noqa: BLE001 - one broken submission must not stop the rest
        return _grader_error(prepared.student, prepared.source_path, error), []


def _runs(batch: list[Prepared], config: GradingConfig, sandbox: str, guard: FileGuard | None,
          subordinate: Subordinate | None) -> dict[tuple[str, str], Run | Exception]:
    """The judges' runs of the submissions, by ``(notebook, student)``, all on shared judges (every
    notebook's: each judge's zygote imports torch once for them all); if that fails (a grader error),
    each submission again on a judge of its own, so that an error costs only the submission it
    happened in."""
    work = [((p.source_path.stem, p.student), p.requests) for p in batch]
    names = {p.source_path.stem for p in batch}
    try:
        return run_notebooks(work, config, sandbox, guard, subordinate,
                             name=names.pop() if len(names) == 1 else "notebooks")
    except Exception:  # noqa: BLE001 - retried one by one below
        runs: dict[tuple[str, str], Run | Exception] = {}
        for label, requests in work:
            try:
                runs[label] = run_notebook(requests, label, config, sandbox, guard, subordinate)
            except Exception as error:  # noqa: BLE001 - one broken submission must not stop the rest
                runs[label] = error
        return runs


def file_guard(config: GradingConfig) -> FileGuard:
    """Every file of the repository (new ones too), the submissions, and what Python imports at start."""
    roots = [(config.repo, ("*",)), (config.repo / ".git" / "hooks", ("*",)), (config.repo / ".git", ("config",), 0),
             (config.submissions, ("*",))]
    roots += [(config.sources, ("*",))] if not config.sources.resolve().is_relative_to(config.repo.resolve()) else []
    roots += [(Path(p), ("*.py", "*.pth"), 0) for p in site.getsitepackages() if Path(p).is_dir()]
    return FileGuard(roots, skip=(config.out,))


def grade(config: GradingConfig) -> tuple[list[Result], dict]:
    """Grade every submission under ``config.submissions``; returns the rows and run info."""
    sources = {p.stem: p for p in instructor_sources(config.sources)}
    unknown = set(config.notebooks) - set(sources)
    if unknown:
        raise CannotGrade(f"--notebooks: no instructor source for {', '.join(sorted(unknown))} in {config.sources}")
    sandbox, why = choose_sandbox(config.sandbox)
    if sandbox != "bwrap" and not config.trusted:
        raise SandboxRequired(f"{why}; without the sandbox, grading runs only with --trusted "
                              "(for submissions you trust; nothing protects the machine from them)")
    if sandbox == "bwrap":
        try:
            allow_list(config)
        except ValueError as error:
            raise CannotGrade(str(error)) from None
    if sandbox != "bwrap":
        print(f"WARNING: {why}", file=sys.stderr, flush=True)
    # Under bubblewrap the repository and site-packages are read-only to the student: a change
    # there comes from outside (a maintainer's edit) and must be neither blamed nor undone.
    guard = file_guard(config) if sandbox != "bwrap" else None
    subordinate, who = own_uids(config, sandbox)
    found = find_submissions(config, list(sources))
    prepared: list[Prepared | list[Result]] = []
    for student, name, path in found:
        try:
            prepared.append(prepare(student, sources[name], path, config))
        except Exception as error:  # noqa: BLE001 - one broken submission must not stop the rest
            prepared.append(_grader_error(student, sources[name], error))
    batches: dict[str, list[Prepared]] = {}  # by notebook: the judges take them one notebook after another
    runs: dict[tuple[str, str], Run | Exception] = {}
    for ready in prepared:
        if isinstance(ready, Prepared) and ready.needs_judge:
            batches.setdefault(ready.source_path.stem, []).append(ready)
        elif isinstance(ready, Prepared):  # nothing but untouched, missing or refused answers
            runs[(ready.source_path.stem, ready.student)] = Run()
    for name, batch in batches.items():
        print(f"grading {shown(name)}: {len(batch)} submission(s) ...", flush=True)
    if batches:  # every notebook's submissions share judges
        runs.update(_runs([p for batch in batches.values() for p in batch], config, sandbox, guard, subordinate))
    results: list[Result] = []
    integrity: list[Integrity] = []
    for (student, name, _), ready in zip(found, prepared, strict=True):
        rows, problems = (ready, []) if not isinstance(ready, Prepared) else \
            _finish_safely(ready, runs[(name, student)], config)
        results += rows
        integrity += problems
    own = subordinate is not None or (os.geteuid() == 0 and may_drop(config, sandbox))
    uid_note = "" if os.geteuid() != 0 or own else \
        " (root, but the judges run as root: make the repository and Python readable by others)"
    hints = [{"student": p.student, "exercise": f"{p.source_path.stem}/{key}", "opened": opened}
             for p in prepared if isinstance(p, Prepared) for key, opened in sorted(p.hints.items())
             if key in {e.key for e in p.exercises}]
    info = {"sandbox": sandbox, "trusted": config.trusted, "hint_cost": config.hint_cost, "hints": hints,
            "sandbox_note": "; ".join(filter(None, (why, who))) + uid_note,
            "judge_uid": "own" if own else "the grader's", "limits": _limits(sandbox),
            "integrity": [asdict(problem) for problem in integrity]}
    return results, info


def _limits(sandbox: str) -> str:
    """What bounds an exercise here, for the report's ``limits``."""
    controllers = available()
    limits = (f"memory and processes per exercise (cgroups: {', '.join(controllers)})" if controllers else
              "memory and processes per process only: no cgroup can be made here (course/grading/__init__.py)")
    return limits + ("; files per exercise (a tmpfs)" if sandbox == "bwrap" else "; files per file only")


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _check(config: GradingConfig) -> dict[str, str]:
    """Every value the grading would be meaningless with (a correct answer scoring zero), by flag."""
    problems = {**is_dir(config, "sources", "repo"), **is_dir_or_absent(config, "out"),
                **positive(config, "cpu_seconds", "processes", "file_mb"),
                **at_least(config, 0, "hint_cost", why="points"),
                **at_least(config, 1, "timeout", "cell_timeout", why="seconds"),
                **at_least(config, 64, "memory_mb", why="MiB: the checks need some"),
                **at_least(config, 16, "open_files", why="Python needs some"),
                **finite(config, "timeout", "cell_timeout", "hint_cost")}
    if "sources" not in problems and (empty := sources_problem(Path(config.sources))):
        problems["sources"] = empty  # every submission would be graded against nothing, rc 0
    if config.submissions is None or not Path(config.submissions).is_dir():
        problems["submissions"] = f"{config.submissions} is not a folder (one sub-folder per student)"
    elif "out" not in problems and _inside(Path(config.out), Path(config.submissions)):
        problems["out"] = (f"{config.out} is inside --submissions {config.submissions}: the report "
                           "would be graded as a student's folder, or shown in one")
    if config.sandbox == "none" and not config.trusted:
        problems["sandbox"] = ("none runs student code without a sandbox: add --trusted, only for "
                               "submissions you trust")
    return problems


def main(argv: list[str] | None = None) -> int:
    config = parse_dataclass_args(GradingConfig, argv, description=__doc__.splitlines()[0],
                                  validate=_check, epilog="A learner grades their own notebook, where it is, "
                                  "with: python -m course.grading --self PATH (make grade-me NOTEBOOK=PATH).")
    config.submissions, config.out = config.submissions.resolve(), config.out.resolve()
    config.sources = config.sources.resolve()
    try:
        results, info = grade(config)
    except SandboxRequired as error:
        print(f"python -m course.grading: error: {error}", file=sys.stderr)
        return 2
    except CannotGrade as error:
        return fail(shown(error), prog="python -m course.grading")
    totals = write_report(results, config.out, info)
    print(f"sandbox: {info['sandbox_note']}")
    print(f"limits: {info['limits']}")
    if info["sandbox"] != "bwrap":
        print("graded WITHOUT the sandbox: the input was declared trusted (--trusted)")
    for problem in info["integrity"]:
        print(f"{'NOTE' if problem['kind'] == 'rebound' else 'WARNING'} {shown(problem['student'])} "
              f"{shown(problem['exercise'])}: {shown(problem['kind'])}: "
              + shown("; ".join(map(str, problem["details"]))), file=sys.stderr)
    for student, total in totals.items():
        print(f"{shown(student)}: {total['points']:g} / {total['max_points']:g}")
    print(f"report: {config.out / 'grades.csv'} and grades.json")
    return 0

