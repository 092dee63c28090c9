"""course.judge: answer cells hold only definitions; each exercise runs alone, limited and audited."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import nbformat
import pytest

from course.assignments import exercises_of, instructor_sources, student_version
from course.judge import answer_problems
from course.judging import JUDGE
from tests.fixtures.submissions.make_submissions import solution_of

REPO = Path(__file__).resolve().parents[1]


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
    limits = {"repo": str(REPO), "uid": None, "cell_timeout": 5, "memory_mb": 256, "cpu_seconds": 10,
              "processes": 16, "open_files": 64, "file_mb": 1, **limits}
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    done = subprocess.run([*JUDGE, json.dumps(limits)], input=lines, capture_output=True, text=True,
                          cwd=tmp_path, timeout=60, check=False, env={"PYTHONPATH": str(REPO)})
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    return {r.get("key", r.get("index")): r for r in replies}, done


def _exercise(key, answer, check="assert f() == 1"):
    return {"op": "exercise", "key": key, "answer": answer, "check": check}


def test_each_exercise_runs_alone_and_rebinding_what_the_checks_use_scores_zero(tmp_path):
    setup = {"op": "setup", "index": 0, "code": "import math\nexpected = 1\ndef same(a, b):\n    return a == b"}
    replies, done = _judge(tmp_path, [
        setup,
        _exercise("rebind", "def f():\n    global same\n    same = lambda a, b: True\n    return 2",
                  "value = f()\nassert same(value, expected)"),
        _exercise("module", "def f():\n    import math\n    math.isclose = lambda *a, **k: True\n    return 2",
                  "assert math.isclose(f(), 1)"),
        _exercise("leak", "def f():\n    import math\n    math.pi = 3\n    return 1"),
        _exercise("after", "def f():\n    return 1", "import math\nassert math.pi > 3.1 and same(f(), expected)"),
        _exercise("exits", "def f():\n    import os\n    os._exit(0)"),
        _exercise("loops", "def f():\n    while True:\n        pass"),
        _exercise("memory", "def f():\n    return len(bytearray(2**30))"),
        _exercise("output", "def f():\n    print('x' * 2**21)\n    return 1"),
    ])
    assert replies[0]["error"] is None, done.stderr
    assert replies["rebind"]["check_error"] is None and replies["rebind"]["tampered"], replies["rebind"]
    assert "math.isclose" in replies["module"]["tampered"]
    assert replies["after"]["check_error"] is None and not replies["after"]["tampered"], \
        "what one exercise changed is gone for the next"
    assert "without a result" in replies["exits"]["fatal"]
    assert "timed out" in replies["loops"]["fatal"]
    assert "memory limit" in replies["memory"]["check_error"]
    assert "size limit" in replies["output"]["check_error"]
