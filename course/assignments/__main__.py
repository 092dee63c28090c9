"""Write the student versions of the exercises: ``python -m course.assignments build|list``.

``build`` (``make assignments``) writes each instructor source's student version (the library,
``course.assignments``, says what it holds); ``list`` shows each notebook's exercises and points.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.cli import is_dir, is_dir_or_absent, option, parse_dataclass_args
from course.assignments import (
    build,
    exercises_of,
    instructor_sources,
    learner_folder,
    solutions_dir,
    sources_problem,
)


@dataclass
class AssignmentsConfig:
    """The command line of ``python -m course.assignments``."""

    command: str = option("build", "build: write student versions; list: show exercises and points",
                          choices=("build", "list"), positional=True, nargs="?")
    out: Path | None = option(None, "output folder of the student versions (default: the folder "
                              "above a solutions/ --sources: chapters/exercises, in place)")
    sources: Path | None = option(None, "folder of instructor sources (default: "
                                  "chapters/exercises/solutions)")


def check_config(config: AssignmentsConfig) -> dict[str, str]:
    """Problems of a finished configuration, by field: student versions never overwrite the
    instructor sources, and go where asked (the folder above ``solutions/`` by default)."""
    problems = {**is_dir(config, "sources"), **is_dir_or_absent(config, "out")}
    sources = (config.sources or solutions_dir()).resolve()
    if "sources" not in problems and (empty := sources_problem(sources)):
        problems["sources"] = empty
    if config.command != "build" or "out" in problems:
        return problems
    if config.out is None and learner_folder(sources) is None:
        problems["out"] = (f"needed: {config.sources} is not a solutions/ folder, so its student "
                           "versions have no folder of their own")
    elif config.out is not None and config.out.resolve() == sources:
        problems["out"] = (f"{config.out} is the instructor sources' folder: the student "
                           "versions would overwrite them")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = parse_dataclass_args(AssignmentsConfig, argv, description=__doc__.splitlines()[0],
                                validate=check_config)
    args.sources = args.sources or solutions_dir()
    sources = instructor_sources(args.sources)  # not empty: check_config
    if args.command == "list":
        import nbformat

        for source in sources:
            exercises = exercises_of(nbformat.read(source, as_version=4), name=source.name)
            print(f"{source.name}: " + ", ".join(f"{e.key} ({e.points:g})" for e in exercises))
        return 0
    in_place = learner_folder(args.sources.resolve())
    args.out = args.out or in_place
    # The committed learner folder holds notebooks only; a folder to hand out gets the manifest.
    manifest = build(args.out, sources, manifest=args.out.resolve() != in_place)
    for stem, entry in manifest.items():
        print(f"{args.out / (stem + '.ipynb')}: {len(entry['exercises'])} exercises, "
              f"{entry['total_points']:g} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
