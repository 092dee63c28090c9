"""course.grading.inside.judge: answer cells hold only definitions; each exercise runs alone, limited,
its rebinding recorded."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from course.assignments import exercises_of, instructor_sources, student_version
from course.grading import judges
from course.grading.config import GradingConfig
from course.grading.inside.answer_rules import answer_problems
from course.grading.judges import exchange, judge_command, run_notebook, run_notebooks
from tests.fixtures.submissions.make_submissions import solution_of

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", instructor_sources(), ids=[p.name for p in instructor_sources()])
def test_solutions_and_student_versions_are_accepted(path):
    source = nbformat.read(path, as_version=4)
    student = student_version(source)
    for exercise in exercises_of(source):
        assert answer_problems(solution_of(source.cells[exercise.answer_cell].source)) is None
        assert answer_problems(student.cells[exercise.answer_cell].source) is None


@pytest.mark.parametrize("source, why", [
    ("print('debugging')", "runs code at the top level"),
    ("import os\nos.system('git show HEAD')", "runs code at the top level"),
    ("@functools.lru_cache(maxsize=None)\ndef f():\n    pass", "calls code"),
    ("def f(x=os.system('id')):\n    pass", "calls code"),
    ("def f(x: (lambda: 1)()):\n    pass", "calls code"),
    ("class A(metaclass=M):\n    pass", "class keywords"),
    ("class A:\n    def __init_subclass__(cls):\n        pass", "__init_subclass__"),
    ("class A:\n    x = open('/etc/passwd').read()", "runs code at the top level"),
    ("class A:\n    pass\n\nclass B(A[int]):\n    pass", "subscripts a class of this cell"),
    ("def f(:", "SyntaxError"),
])
def test_code_that_would_run_before_the_checks_is_refused(source, why):
    assert why in (answer_problems(source) or ""), answer_problems(source)


def test_definitions_constants_and_the_placeholder_are_accepted():
    source = ("import torch\nfrom torch import nn\nlr = 0.1\nsizes: tuple = (1, -2)\nname = ...\n"
              "class A(nn.Module):\n    '''doc'''\n    scale = 2\n    @property\n    def p(self) -> int:\n"
              "        return 1\n\ndef f(x: torch.Tensor, *, clock=None) -> 'A':\n    return A()\n"
              "raise NotImplementedError()")
    assert answer_problems(source) is None


def _judge(tmp_path, requests, **limits):
    """Speak the grader's side of the protocol (``course.grading.judges.exchange``) to one judge."""
    limits = {"repo": str(REPO), "uid": None, "cell_timeout": 5, "memory_mb": 256, "cpu_seconds": 10,
              "processes": 16, "open_files": 64, "file_mb": 1, **limits}
    config = SimpleNamespace(timeout=60, cell_timeout=limits["cell_timeout"])
    with open(tmp_path / "judge.err", "w+") as errors:
        proc = subprocess.Popen(judge_command(limits), cwd=tmp_path, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, env={"PYTHONPATH": str(REPO)})
        replies, buffer = {}, bytearray()
        for request in requests:
            reply = exchange(proc, buffer, request, config, time.monotonic() + 60)
            if reply is not None:
                replies[reply.get("key", reply.get("index"))] = reply
        try:
            proc.stdin.close()
        except BrokenPipeError:  # the judge stopped on its own (after a changed file)
            pass
        proc.wait(timeout=30)
        errors.seek(0)
        return replies, SimpleNamespace(stderr=errors.read())


def _exercise(key, answer, check="assert f() == 1"):
    return {"op": "exercise", "key": key, "answer": answer, "check": check}


def test_each_exercise_runs_alone_and_what_an_answer_rebinds_is_recorded_but_changes_no_check(tmp_path):
    setup = {"op": "setup", "index": 0, "code": "import math\nexpected = 1\ndef same(a, b):\n    return a == b"}
    replies, done = _judge(tmp_path, [
        setup,
        _exercise("rebind", "def f():\n    global same\n    same = lambda a, b: True\n    return 2",
                  "value = f()\nassert same(value, expected)"),
        _exercise("module", "def f():\n    import math\n    math.isclose = lambda *a, **k: True\n    return 2",
                  "assert math.isclose(f(), 1)"),
        _exercise("leak", "def f():\n    import math\n    math.pi = 3\n    return 1"),
        _exercise("honest", "def f():\n    import math\n    math.isclose = lambda *a, **k: False\n    return 1",
                  "assert math.isclose(f(), 1)"),
        _exercise("after", "def f():\n    return 1", "import math\nassert math.pi > 3.1 and same(f(), expected)"),
        _exercise("exits", "def f():\n    import os\n    os._exit(0)"),
        _exercise("loops", "def f():\n    while True:\n        pass"),
        _exercise("memory", "def f():\n    return len(bytearray(2**30))"),
        _exercise("output", "def f():\n    print('x' * 2**21)\n    return 1"),
    ])
    assert replies[0]["error"] is None, done.stderr
    assert replies["rebind"]["check_error"] and "same" in replies["rebind"]["rebound"], \
        "the checker kept its own `same`; the answer's process reports what it rebound"
    assert replies["module"]["check_error"] and "math.isclose" in replies["module"]["rebound"]
    assert not replies["module"]["tampered"], "rebinding in its own process is recorded, not tampering"
    assert replies["honest"]["check_error"] is None and replies["honest"]["rebound"] == ["math.isclose"], \
        "a right answer that rebinds a library name in its own process still passes"
    assert replies["after"]["check_error"] is None and not replies["after"]["tampered"], \
        "what one exercise changed is gone for the next"
    assert "the answer's process ended" in replies["exits"]["check_error"], replies["exits"]
    assert "timed out" in replies["loops"]["fatal"]
    assert "memory limit" in replies["memory"]["check_error"]
    assert "size limit" in replies["output"]["check_error"]


def test_an_answer_that_changes_the_setups_files_is_caught_and_the_judge_starts_afresh(tmp_path):
    setup = {"op": "setup", "index": 0, "code": "from pathlib import Path\nPath('data').mkdir()\n"
             "Path('data/x.txt').write_text('42')\ndef reference():\n    return Path('data/x.txt').read_text()"}
    replies, _ = _judge(tmp_path, [
        setup,
        _exercise("own", "def f():\n    return '1'",
                  "Path('data/x.txt').write_text('1')\nassert f() == reference()"),
        _exercise("forge", "def f():\n    from pathlib import Path\n    Path('data/x.txt').write_text('7')\n"
                  "    return '7'", "assert f() == reference()"),
        _exercise("next", "def f():\n    return 1"),
    ])
    assert replies["own"]["check_error"] is None and not replies["own"]["tampered"], \
        "the checker may rewrite the setup's files itself"
    assert replies["forge"]["check_error"] is None, "the forgery worked on the check..."
    assert replies["forge"]["tampered"] == ["data/x.txt (changed)"] and replies["forge"]["restart"], \
        "...and is caught: the file the reference reads was changed by the answer"
    assert "next" not in replies, "this judge stops: the grader starts a fresh one for the rest"


def test_after_a_changed_file_a_fresh_judge_grades_the_rest(tmp_path):
    setup = {"op": "setup", "index": 0, "code": "from pathlib import Path\nPath('files').mkdir()\n"
             "Path('files/x.txt').write_text('42')"}
    config = GradingConfig(tmp_path / "subs", tmp_path / "out", repo=REPO, sandbox="none", cell_timeout=10,
                           trusted=True)
    run = run_notebook([
        setup,
        _exercise("forge", "def f():\n    from pathlib import Path\n    Path('files/x.txt').write_text('7')\n"
                  "    return 1"),
        _exercise("next", "def f():\n    from pathlib import Path\n    return int(Path('files/x.txt').read_text())",
                  "assert f() == 42"),
    ], "student", config, "none", None)
    assert run.replies["forge"]["tampered"] == ["files/x.txt (changed)"]
    assert run.replies["next"]["check_error"] is None and not run.replies["next"]["tampered"], \
        "the next exercise sees the setup's file as the setup made it"


def test_an_answer_may_not_define_what_the_checks_call_by_name(tmp_path):
    setup = {"op": "setup", "index": 0, "code": "def same(a, b):\n    return a == b"}
    replies, _ = _judge(tmp_path, [
        setup,
        _exercise("builtin", "def abs(x):\n    return 0\n\ndef f():\n    return 5", "assert abs(f() - 1) < 1e-6"),
        _exercise("setup", "def same(a, b):\n    return True\n\ndef f():\n    return 5", "assert same(f(), 1)"),
        _exercise("honest", "def f():\n    return 1", "assert abs(f() - 1) < 1e-6 and same(f(), 1)"),
    ])
    assert replies["builtin"]["tampered"] == ["abs"] and replies["setup"]["tampered"] == ["same"]
    assert replies["honest"]["check_error"] is None and not replies["honest"]["tampered"]


def test_not_implemented_at_the_first_call_does_not_skip_the_visible_checks(tmp_path):
    check = ("from course.student.checks import checks\nwith checks('Exercise'):\n    assert f(1) == 2\n"
             "assert f(0) == 0")  # the hidden check alone would pass
    replies, _ = _judge(tmp_path, [_exercise("dodge", "calls = [0]\n\ndef f(x):\n    calls[0] += 1\n"
                                             "    if calls[0] == 1:\n        raise NotImplementedError()\n"
                                             "    return 0", check)])
    assert replies["dodge"]["check_error"].startswith("NotImplementedError"), replies["dodge"]


def test_the_judge_says_what_starts_it_when_started_by_hand():
    for args in (["--help"], [], ["{not json"]):
        done = subprocess.run([sys.executable, "-m", "course.grading.inside.judge", *args], capture_output=True,
                              text=True, cwd=REPO, timeout=60, check=False)
        assert done.returncode == 2, done.stderr
        assert "started by the grader" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_judge_refuses_privileges_the_grader_would_have_dropped(tmp_path):
    limits = {"repo": str(REPO), "uid": 4242}
    done = subprocess.run([sys.executable, "-m", "course.grading.inside.judge", str(limits).replace("'", '"')],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
                          env={"PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and "its own uid 4242" in done.stderr, done.stderr


#: An answer that reads its whole memory (``/proc/self/mem``, every readable mapping) for lines
#: of the form ``HIDDEN_LINE("c0ffee-NAME")``; "own" is in its own cell: the scan works.
_SCANNER = '''own = 'HIDDEN_LINE("c0ffee-own")'


def f():
    import re
    prefix = b'HIDDEN_LINE("c0ffee-'
    found, scanned = set(), 0
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as mem:
        for line in maps.read().splitlines():
            span, perms = line.split()[:2]
            if not perms.startswith("r") or line.endswith(("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                region = mem.read(end - start)
            except (OSError, OverflowError, ValueError):
                continue
            scanned += len(region)
            at = region.find(prefix)
            while at >= 0:
                name = re.match(rb'([a-z]+)"[)]', region[at + len(prefix):at + len(prefix) + 20])
                if name:
                    found.add(name.group(1).decode())
                at = region.find(prefix, at + 1)
    return sorted(found), scanned
'''


def test_no_answer_finds_an_earlier_or_later_exercises_hidden_check_in_its_memory(tmp_path):
    """The checks of other exercises never were in the memory an answer process starts from:
    every exercise's checker and answer process fork from a template made before any check."""
    check = 'found, scanned = f()\nassert scanned > 2**20 and "own" in found, (found, scanned)\n' \
            'assert found == ["own"], f"found {found}"  # HIDDEN_LINE("c0ffee-{name}")\n' + \
            "# a hidden check of a real size (text past 512 bytes is not in Python's small-object pools)\n" * 40
    replies, done = _judge(tmp_path, [
        {"op": "setup", "index": 0, "code": "import math"},
        _exercise("first", _SCANNER, check.replace("{name}", "first")),
        _exercise("second", _SCANNER, check.replace("{name}", "second")),
        _exercise("third", _SCANNER, check.replace("{name}", "third")),
    ], memory_mb=1024)
    for key in ("first", "second", "third"):
        assert replies[key]["check_error"] is None, (key, replies[key], done.stderr[-2000:])


def test_what_an_exercise_leaves_in_dev_shm_is_removed_before_the_next(tmp_path):
    """The sandbox's /dev/shm is bounded for the notebook; emptied after each exercise, for each."""
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "before").write_text("the setup's")
    writes = f"def f():\n    open({str(shm / 'left')!r}, 'w').write('x')\n    return 1"
    replies, done = _judge(tmp_path, [
        _exercise("writes", writes),
        _exercise("reads", f"def f():\n    import os\n    return len(os.listdir({str(shm)!r}))"),
    ], shm=str(shm))
    assert replies["writes"]["check_error"] is None, (replies, done.stderr[-1000:])
    assert replies["reads"]["check_error"] is None, "only the file that was there before is left"
    assert sorted(p.name for p in shm.iterdir()) == ["before"]


#: Parent pid of a process, from ``/proc``: an answer climbs from itself to the zygote with it.
_CLIMB = """def _parent(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])

"""


def test_one_judge_grades_the_submissions_in_turn_and_sabotage_costs_only_its_author(tmp_path, monkeypatch):
    """Submissions share a judge (of one notebook or of several), each from a fresh template with only
    its own earlier answers and without the files an earlier one's setup left; one that stops the zygote
    or kills its template leaves its own points as they are and the next submission is graded on a
    fresh judge, in full."""
    judges_started = []
    start = judges.run_judge
    monkeypatch.setattr(judges, "run_judge", lambda work, *a: judges_started.append(len(work)) or start(work, *a))
    setup = {"op": "setup", "index": 0, "code": "seen = []"}
    writes = {"op": "setup", "index": 0, "code": "from pathlib import Path\nseen = []\n"
              "Path('left-by-p').mkdir()\nPath('left-by-p/setup.txt').write_text('p')"}
    looks = {"op": "setup", "index": 0, "code": "import os\nseen = []\nfound = sorted(os.listdir('.'))"}
    uses_g = _exercise("uses", "def f():\n    return g()", "assert f() == 1 and seen == []")
    stops_zygote = _CLIMB + ("def f():\n    import os, signal\n    template = _parent(os.getppid())\n"
                             "    os.kill(_parent(template), signal.SIGSTOP)\n    return 1")
    kills_template = _CLIMB + "def f():\n    import os, signal\n    os.kill(_parent(os.getppid()), signal.SIGKILL)\n" \
        "    return 1"
    work = [
        ("p", [writes, _exercise("defines", "def g():\n    seen.append(1)\n    return 1\n\ndef f():\n    return g()",
                                 "assert f() == 1 and Path('left-by-p/setup.txt').read_text() == 'p'"), uses_g]),
        ("q", [looks, uses_g,  # p's g is not an earlier answer of q's, nor are p's setup files there
               _exercise("clean", "def f():\n    return 1", "assert 'left-by-p' not in found, found")]),
        ("r", [setup, _exercise("stops", stops_zygote)]),
        ("s", [setup, _exercise("honest", "def f():\n    return 1")]),
        ("t", [setup, _exercise("kills", kills_template)]),
        ("u", [setup, _exercise("honest", "def f():\n    return 1")]),
    ]
    config = GradingConfig(tmp_path / "subs", tmp_path / "out", repo=REPO, sandbox="none", cell_timeout=10,
                           trusted=True)
    runs = run_notebooks(work, config, "none", None)
    assert runs["p"].replies["uses"]["check_error"] is None, "an exercise sees its own earlier answers"
    assert runs["p"].replies["defines"]["check_error"] is None, runs["p"].replies["defines"]
    assert "NameError" in runs["q"].replies["uses"]["check_error"], "but not another submission's"
    assert runs["q"].replies["clean"]["check_error"] is None, "the judge removed what p's setup cells left"
    assert runs["r"].replies["stops"]["check_error"] is None, "stopping the zygote after its answer ran costs r nothing"
    assert "killed" in runs["t"].fatal["kills"], "killing its own template costs t that exercise"
    for honest in ("s", "u"):
        assert runs[honest].replies["honest"]["check_error"] is None and not runs[honest].fatal, runs[honest]
    assert judges_started == [6, 3, 1], "p, q and r on the first judge; s and t on a second; u on a third"
