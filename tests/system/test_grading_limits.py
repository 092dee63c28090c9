"""Limits per exercise and a sandbox from an allow-list, under a uid of its own.

One grader run as root (bubblewrap; cgroups where this machine gives them): ``h13_limits`` goes far
over the exercise's memory, disk, processes and ``/dev/shm`` while staying under every per-process
limit, ``h14_secrets`` reads a 0600 key in the grader's HOME, the instructor source and another
student's submission, and an honest student graded after them gets full marks. The secrets attack is
graded again by a grader that an ordinary user starts (a temporary user, made with ``useradd`` when
the tests run as root, with subordinate uids where ``uidmap`` is installed), on a copy of the
repository whose ``common/`` holds a 0600 file of that user: the sandbox shows the folder, and the
judge, under a subordinate uid of its own, cannot read the file. The answers are in
tests/fixtures/submissions/hostile.py.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from course.grading.cgroups import Cgroups
from course.grading.classroom import grade
from course.grading.config import GradingConfig
from course.grading.report import write_report
from course.grading.uids import OWN, SHARED
from tests.fixtures.submissions.hostile import LIMITED, LIMITED_POINTS
from tests.fixtures.submissions.make_submissions import with_answers
from tests.system_parts import require, require_bubblewrap, require_program

REPO = Path(__file__).resolve().parents[2]
NAME = "ex01_pytorch_basics.ipynb"
SOURCE = REPO / "chapters" / "exercises" / "solutions" / NAME
#: The limits the attacks are measured against (a process may add 200 MiB, a file take 32 MiB).
LIMITS = {"memory_mb": 200, "file_mb": 32, "processes": 16}
HONEST = dict.fromkeys(("ex1", "ex2", "ex3", "ex4", "ex5"))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _bubblewrap():
    """Every test here grades in the sandbox: skipped where bubblewrap cannot start, failed under CI."""
    require_bubblewrap()


def _plant_key(home: Path, owner: int, group: int) -> str:
    """A 0600 key in ``home/.ssh``, owned by the grading user; its text (a random token)."""
    token = f"ssh-key-{secrets.token_hex(12)}"
    key = home / ".ssh" / "id_key"
    key.parent.mkdir(parents=True, mode=0o700)
    key.write_text(token + "\n")
    key.chmod(0o600)
    for path in (home, key.parent, key):
        os.chown(path, owner, group)
    return token


def _submissions(root: Path, students: tuple[str, ...], key: Path, other: Path | None = None) -> Path:
    source = nbformat.read(SOURCE, as_version=4)
    fill = {"key": str(key), "source": str(SOURCE), "other": str(other or root / "zz_honest" / NAME)}
    for student in students:
        (root / student).mkdir(parents=True)
        nbformat.write(with_answers(source, LIMITED.get(student, HONEST), fill), root / student / NAME)
    return root


def _outputs(out: Path) -> str:
    """Everything the report and the feedback say."""
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(out.rglob("*")) if p.is_file())


def _messages(out: Path, student: str) -> list[str]:
    report = json.loads((out / "grades.json").read_text(encoding="utf-8"))
    return [r["message"] for r in report["results"] if r["student"] == student]


def _points(out: Path) -> dict[str, float]:
    report = json.loads((out / "grades.json").read_text(encoding="utf-8"))
    return {student: total["points"] for student, total in report["totals"].items()}


@pytest.fixture(scope="module")
def as_root(tmp_path_factory):
    """One grader run of all three students, as whoever runs the tests (root: judges under uids of their own)."""
    root = tmp_path_factory.mktemp("limits")
    token = _plant_key(root / "home", os.getuid(), os.getgid())
    subs = _submissions(root / "subs", ("h13_limits", "h14_secrets", "zz_honest"), root / "home" / ".ssh" / "id_key")
    config = GradingConfig(subs, root / "out", repo=REPO, notebooks=(Path(NAME).stem,), cell_timeout=40,
                           timeout=400, **LIMITS)
    results, info = grade(config)
    write_report(results, config.out, info)
    probe = Cgroups.create(1, 1)
    if probe is not None:
        probe.remove()
    return {"out": config.out, "token": token, "cgroups": probe is not None}


def test_limits_hold_for_the_exercise_as_a_whole_and_each_hit_is_named(as_root):
    out = as_root["out"]
    require("cgroups", None if as_root["cgroups"] else
            "no cgroup can be made here: memory and processes are bounded per process only")
    messages = _messages(out, "h13_limits")
    assert "the memory limit of 200 MiB for the exercise was reached" in messages[0], messages[0]
    assert "the disk limit of 32 MiB for the exercise was reached" in messages[1], messages[1]
    assert "the process limit of 16 for the exercise was reached" in messages[2], messages[2]
    assert "memory limit of 200 MiB" in messages[3] or "/dev/shm limit of 200 MiB" in messages[3], messages[3]
    assert messages[4] == "passed", "the exercise after them, graded by the same judge, is unaffected"
    points = _points(out)
    assert points["h13_limits"] == LIMITED_POINTS["h13_limits"]
    assert points["zz_honest"] == 10, _messages(out, "zz_honest")
    probe = Cgroups.create(1, 1)  # made where the judges' were
    left = sorted({p for _, root in probe.roots.values()
                   for p in root.parent.glob(f"grading-{os.getpid()}-*") if p != root})
    probe.remove()
    assert left == [], f"the judges' cgroups were left behind: {left}"


def test_files_outside_the_allow_list_are_absent_for_a_root_grader(as_root):
    out = as_root["out"]
    first = _messages(out, "h14_secrets")[0]
    for name in ("/.ssh/id_key", NAME[-12:], "root/.bashrc", "/etc/shadow"):  # the last 12 characters
        assert f"{name}: FileNotFoundError" in first, first
    assert as_root["token"] not in _outputs(out), "the grader's key reached the report"
    assert _points(out)["h14_secrets"] == LIMITED_POINTS["h14_secrets"]


def _opened(paths: list[Path], keep: Path) -> list[str]:
    """Shell lines (root, in a mount namespace of the test's own) that make folders no other user may
    search (``/root`` holding the interpreter) passable: an empty tmpfs with the way through bound back."""
    closed: dict[Path, set[Path]] = {}
    for path in paths:
        chain = [*reversed(path.parents), path]
        for above, below in zip(chain, chain[1:], strict=False):
            if not above.stat().st_mode & 0o001:
                closed.setdefault(above, set()).add(below)
                break
    lines = [f"mkdir {keep}"]
    for n, (above, belows) in enumerate(closed.items()):
        kept = [(below, keep / f"{n}-{m}") for m, below in enumerate(sorted(belows))]
        lines += [f"mkdir {k} && mount --bind {b} {k}" for b, k in kept]
        lines.append(f"mount -t tmpfs -o mode=0755 tmpfs {above}")
        lines += [f"mkdir -p {b} && mount --bind {k} {b}" for b, k in kept]
    return lines


def _copy_repo(root: Path) -> tuple[Path, Path, str]:
    """What the grader needs of the repository, copied to ``root/repo`` (the grading user's own), and a
    0600 file of that user in its ``common/``, a folder the sandbox shows; its path and text."""
    skip = shutil.ignore_patterns("__pycache__")
    for part in ("common", "course"):
        shutil.copytree(REPO / part, root / "repo" / part, ignore=skip)
    shutil.copy2(REPO / "pyproject.toml", root / "repo")
    (root / "repo" / "chapters" / "exercises" / "solutions").mkdir(parents=True)
    shutil.copy2(SOURCE, root / "repo" / "chapters" / "exercises" / "solutions")
    token = f"instructor-secret-{secrets.token_hex(12)}"
    secret = root / "repo" / "common" / "instructor.key"  # the answer names the last 12 characters
    secret.write_text(token + "\n")
    secret.chmod(0o600)
    return root / "repo", secret, token


def _subordinate_ids(name: str) -> None:
    """Give the temporary user a range of subordinate uids and gids (``userdel`` removes them)."""
    if shutil.which("newuidmap") is None:
        return
    start = 1_100_000_000 + secrets.randbelow(4000) * 65536  # below the root grader's judge uids
    span = f"{start}-{start + 65535}"
    subprocess.run(["usermod", "--add-subuids", span, "--add-subgids", span, name], check=True, capture_output=True)


def _as_user(root: Path, repo: Path, command: list[str]) -> subprocess.CompletedProcess:
    """Run ``command`` as an ordinary user: this one, or (as root) a temporary one made for it."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root / "home"),
           "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    if os.geteuid() != 0:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    name = f"grader{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", str(root / "home"), "--shell",
                    "/usr/sbin/nologin", name], check=True, capture_output=True)
    try:
        _subordinate_ids(name)
        user = pwd.getpwnam(name)
        for path in (root, *root.rglob("*")):
            os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
        # the copy of the repository is the user's own, below its own folder: only Python may need a way through
        setup = _opened([Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()], root / "keep")
        drop = ["setpriv", "--reuid", str(user.pw_uid), "--regid", str(user.pw_gid), "--init-groups", "env", "-i",
                *(f"{k}={v}" for k, v in env.items())]
        script = " && ".join([*setup, "exec \"$@\""])
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                               *drop, *command], capture_output=True, text=True, timeout=600, check=False)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def _skip_if_not_graded(done: subprocess.CompletedProcess, out: Path) -> None:
    if done.returncode != 0 and not out.exists():  # nothing was graded: why
        for sign, why in (("Permission denied", "the interpreter cannot be run by another user"),
                          ("unshare:", "no mount namespace can be made here"),
                          ("bwrap does not work", "bubblewrap does not work for an ordinary user")):
            if sign in done.stderr:
                require("grading as an ordinary user", f"{why} here: {done.stderr.strip()[-300:]}")


def test_files_outside_the_allow_list_are_absent_for_an_ordinary_users_grader():
    """The normal case for an instructor: with subordinate uids each judge has a uid of its own, so a
    0600 file of the instructor's inside a folder the sandbox shows (``common/``) cannot be read."""
    if os.geteuid() == 0:
        require_program("useradd, an ordinary user to grade as", "useradd", "apt-get install passwd")
    root = Path(tempfile.mkdtemp(prefix="grade-as-user-"))
    try:
        uid, gid = os.getuid(), os.getgid()
        key_token = _plant_key(root / "home", uid, gid)
        repo, secret, secret_token = _copy_repo(root)
        subs = _submissions(root / "subs", ("h14_secrets",), root / "home" / ".ssh" / "id_key", other=secret)
        out = root / "out"
        done = _as_user(root, repo, [sys.executable, "-m", "course.grading", "--submissions", str(subs), "--out",
                                     str(out), "--repo", str(repo), "--notebooks", Path(NAME).stem,
                                     "--cell-timeout", "40"])
        _skip_if_not_graded(done, out)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        first = _messages(out, "h14_secrets")[0]
        assert "/.ssh/id_key: FileNotFoundError" in first and f"{NAME[-12:]}: FileNotFoundError" in first, first
        assert key_token not in _outputs(out), "the grading user's 0600 key reached the report"
        assert _points(out)["h14_secrets"] == LIMITED_POINTS["h14_secrets"], done.stdout
        report = json.loads((out / "grades.json").read_text())
        if report["judge_uid"] != "own" and os.geteuid() != 0:
            assert SHARED in report["sandbox_note"] and f"sandbox: {report['sandbox_note']}" in done.stdout
            require("subordinate uids", "none for this user in /etc/subuid (the report says so): "
                    + report["sandbox_note"])
        if shutil.which("newuidmap") is None:
            assert report["judge_uid"] == "the grader's" and SHARED in report["sandbox_note"], report
            require("uidmap", "newuidmap not found (make system-deps): judges share the grader's uid")
        assert report["judge_uid"] == "own" and OWN in report["sandbox_note"], report["sandbox_note"]
        assert f"{secret.name[-12:]}: PermissionError" in first, "shown but unreadable: " + first
        assert secret_token not in _outputs(out), "the instructor's 0600 file in common/ reached the report"
    finally:
        shutil.rmtree(root, ignore_errors=True)
