"""The classroom run: every exercise notebook graded as an instructor hands it out and collects it.

The instructor sources grade full marks through the answer/checker channel (ex04-ex07's torchrun jobs
included), the student versions as committed score zero as not attempted (without a judge: they are run
top to bottom in tests/system/test_assignments_processes.py), an answer that passed an older check fails
the current one, and one judge grades them all. Its own file, so that ``--dist loadfile`` can run it beside
tests/system/test_grading.py's hostile submissions instead of after them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from course.assignments import exercises_dir, exercises_of, solutions_dir, work_files
from course.grading import judges
from course.grading.classroom import grade
from course.grading.config import GradingConfig
from course.grading.sandbox import choose_sandbox
from tests.fixtures.submissions.make_submissions import with_answers

REPO = Path(__file__).resolve().parents[2]
BWRAP = choose_sandbox("auto")[0] == "bwrap"


#: ex03 Exercise 2 answered by a dataset whose instance holds only the two arrays (what ``vars(ds)``
#: shows) but serves the samples from a list kept on the class: a check of ``vars`` alone passes it.
_KEEPS_THE_LIST = '''class CompactDataset(Dataset):
    kept = {}

    def __init__(self, samples) -> None:
        CompactDataset.kept["samples"] = list(samples)
        self.paths = np.array([str(path) for path, _ in samples], dtype=np.str_)
        self.labels = np.array([label for _, label in samples], dtype=np.int64)

    def __len__(self) -> int:
        return len(CompactDataset.kept["samples"])

    def __getitem__(self, index: int):
        return CompactDataset.kept["samples"][index]'''




#: Seconds for the classroom run (the first of its tests pays for it): every exercise notebook of
#: three students graded, torchrun jobs of ex04-ex07 included; `make test`'s 300 s is too short
#: when the other worker runs the heaviest tests beside it.
CLASSROOM_TIMEOUT = 900


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """Every exercise notebook handed in by three students, graded in one run (every submission of
    every notebook on one judge): the instructor (the solutions), "blank" (the student versions,
    untouched) and "lister" (ex03's student version, its Exercise 2 answered with ``_KEEPS_THE_LIST``)."""
    root = tmp_path_factory.mktemp("classroom")
    sources = sorted(solutions_dir().glob("ex*.ipynb"))
    for student in ("instructor", "blank", "lister"):
        (root / "subs" / student).mkdir(parents=True)
    for source in sources:
        shutil.copy(source, root / "subs" / "instructor" / source.name)
        shutil.copy(exercises_dir() / source.name, root / "subs" / "blank" / source.name)  # as committed
        for student, folder in (("instructor", solutions_dir()), ("blank", exercises_dir())):
            for script in work_files(folder, source.stem):  # the answer files beside the notebook
                (root / "subs" / student / script.parent.name).mkdir(exist_ok=True)
                shutil.copy(script, root / "subs" / student / script.parent.name / script.name)
    name = "ex03_efficient_pipelines.ipynb"  # lister answers Exercise 2 only: the rest is not run
    source = nbformat.read(solutions_dir() / name, as_version=4)
    nbformat.write(with_answers(source, {"ex2": _KEEPS_THE_LIST}, {}), root / "subs" / "lister" / name)
    # The instructor's own sources and the committed student versions: trusted where no sandbox works.
    config = GradingConfig(root / "subs", root / "out", repo=REPO, cell_timeout=150, trusted=not BWRAP)
    started, start = [], judges.run_judge  # the submissions each judge was given

    def judge(work, *args):
        started.append([label for label, _ in work])
        return start(work, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(judges, "run_judge", judge)
        results, _ = grade(config)
    return sources, results, started


@pytest.mark.slow
@pytest.mark.timeout(CLASSROOM_TIMEOUT)
def test_the_instructor_solutions_score_full_marks_in_every_notebook(classroom):
    """Every check of every exercise notebook works through the answer/checker channel."""
    sources, results, _ = classroom
    mine = [r for r in results if r.student == "instructor"]
    assert len({r.exercise.split("/")[0] for r in mine}) == len(sources) == 7
    assert [r for r in mine if r.points != r.max_points] == []


@pytest.mark.slow
@pytest.mark.timeout(CLASSROOM_TIMEOUT)
def test_one_judge_grades_every_notebook_and_a_blank_notebook_none(classroom):
    """Each judge's zygote imports torch and the setup's libraries (3 CPU seconds): one for the run,
    not one per notebook; the student versions as handed out need no judge at all."""
    sources, _, started = classroom
    wanted = [(source.stem, "instructor") for source in sources] + [("ex03_efficient_pipelines", "lister")]
    assert len(started) == 1 and sorted(started[0]) == sorted(wanted), started


@pytest.mark.slow
@pytest.mark.timeout(CLASSROOM_TIMEOUT)
def test_the_student_versions_score_zero_as_not_attempted(classroom):
    sources, results, _ = classroom
    blank = [r for r in results if r.student == "blank"]
    assert len(blank) == len([r for r in results if r.student == "instructor"]), "every exercise has a row"
    assert [r for r in blank if r.points or "not attempted" not in r.message] == []
    files = [r for r in blank if "as handed out)" in r.message]  # the exercises whose answer is a file
    assert sorted(r.exercise for r in files) == [
        "ex04_distributed_training/ex2", "ex05_sharded_data/ex7", "ex06_fsdp_checkpoints/ex6",
        "ex06_fsdp_checkpoints/ex8", "ex06_fsdp_checkpoints/ex9", "ex07_your_data/ex5"], files


@pytest.mark.slow
@pytest.mark.timeout(CLASSROOM_TIMEOUT)
def test_a_dataset_that_serves_a_kept_list_fails_the_compact_index_exercise(classroom):
    """ex03 Exercise 2 is checked by what its arrays mean, not by what vars() shows."""
    _, results, _ = classroom
    rows = {r.exercise.rsplit("/", 1)[1]: r for r in results if r.student == "lister"}
    assert rows["ex2"].points == 0 and "must be the length of self.labels" in rows["ex2"].message, rows["ex2"]
    assert all(r.points == 0 and "not attempted" in r.message for k, r in rows.items() if k != "ex2"), rows
    assert len(rows) == len(exercises_of(nbformat.read(solutions_dir() / "ex03_efficient_pipelines.ipynb",
                                                       as_version=4))), "lister handed in ex03 only"
