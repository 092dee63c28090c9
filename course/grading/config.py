"""What to grade and how strictly (the command line is built from it), and the report's rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.cli import option
from common.paths import repo_root


@dataclass
class GradingConfig:
    """What to grade and how strictly. The command line is built from these fields."""

    submissions: Path = option(None, "folder with one sub-folder per student")
    out: Path = option(Path("build/grades"), "report folder (grades.csv, grades.json, feedback/)")
    sources: Path | None = option(None, "instructor sources (default: chapters/exercises/solutions)")
    repo: Path | None = option(None, "the repository checkout (default: found from here)")
    notebooks: tuple[str, ...] = option((), "grade only these (e.g. ex01_pytorch_basics); missing "
                                        "ones score 0", nargs="*")
    timeout: float = option(300.0, "seconds per notebook")
    cell_timeout: float = option(60.0, "seconds per exercise (answer and checks)")
    sandbox: str = option("auto", "bwrap: bubblewrap sandbox; none: unsandboxed (needs --trusted); "
                          "auto: bwrap if it works here", choices=("auto", "bwrap", "none"))
    trusted: bool = option(False, "the submissions are trusted: allows grading without the sandbox, "
                           "which does not protect the machine, the network or the report")
    memory_mb: int = option(2048, "memory an exercise may add, MiB: all its processes together and its "
                            "/dev/shm files where cgroups exist, else per process")
    cpu_seconds: int = option(120, "CPU seconds per process of an exercise")
    processes: int = option(64, "processes (threads count) an exercise may run at once")
    open_files: int = option(256, "open files per process")
    hint_cost: float = option(0.0, "points taken off a passed exercise per hint the student opened "
                              "(hint(\"exN\", level) cells that ran); 0, the default, only records them")
    file_mb: int = option(64, "files an exercise may write, MiB: each file (and its output), and in "
                          "the sandbox all its files together")

    def __post_init__(self) -> None:
        self.repo = Path(self.repo) if self.repo else repo_root()
        self.sources = Path(self.sources) if self.sources else self.repo / "chapters" / "exercises" / "solutions"


@dataclass
class Result:
    """One row of the report."""

    student: str
    exercise: str
    points: float
    max_points: float
    message: str


@dataclass
class Integrity:
    """Something a submission did that the report records: undone, refused, or only noted."""

    student: str
    exercise: str
    #: "files": changed, created or deleted outside its working copy (undone; scored zero);
    #: "checker": defined a name the checks call, or changed the setup's files (scored zero);
    #: "rebound": rebound library or setup names in its own process (recorded, not scored).
    kind: str
    details: list[str]
