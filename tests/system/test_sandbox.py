"""course.grading.sandbox: the file guard reports and undoes changes; the sandbox is probed, not assumed."""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from course.grading.cgroups import Cgroups
from course.grading.sandbox import (
    SANDBOX_UID,
    WORKDIR,
    FileGuard,
    bwrap_prefix,
    choose_sandbox,
    setpriv_prefix,
)
from course.grading.uids import Subordinate, find_subordinate, judge_uid, ranges
from tests.system_parts import require, require_bubblewrap, require_program

REPO = Path(__file__).resolve().parents[2]
#: The interpreter running the tests, and what the sandbox must show for it to run there.
PYTHON = [Path(sys.prefix), Path(sys.base_prefix)]


def test_file_guard_reports_and_undoes_every_kind_of_change(tmp_path):
    (tmp_path / "a.py").write_text("a = 1\n")
    (tmp_path / "b.py").write_text("b = 2\n")
    guard = FileGuard([(tmp_path, ("*.py",))])
    assert guard.changes() == []
    (tmp_path / "a.py").write_text("a = 666\n")
    (tmp_path / "b.py").unlink()
    (tmp_path / "c.py").write_text("c = 3\n")
    (tmp_path / "notes.txt").write_text("not watched")
    changes = " ".join(guard.changes())
    assert "modified" in changes and "deleted" in changes and "created" in changes
    guard.restore()
    assert guard.changes() == []
    assert (tmp_path / "a.py").read_text() == "a = 1\n" and not (tmp_path / "c.py").exists()


def test_choose_sandbox_falls_back_or_refuses():
    assert choose_sandbox("none")[0] == "none"
    mode, why = choose_sandbox("auto")
    assert mode in ("bwrap", "none") and why
    if shutil.which("bwrap") is None:
        with pytest.raises(RuntimeError, match="bwrap"):
            choose_sandbox("bwrap")


def test_bwrap_prefix_is_an_allow_list(tmp_path):
    shown = tmp_path / "shown"
    shown.mkdir()
    prefix = bwrap_prefix([shown, tmp_path / "missing"], work_mb=8, shm_mb=4)
    assert prefix[0] == "bwrap" and prefix[-1] == "--"
    assert "--bind" not in prefix, "nothing of the machine is writable"
    bound = [prefix[i + 1] for i, arg in enumerate(prefix) if arg == "--ro-bind"]
    assert "/" not in bound and str(shown) in bound and "/usr" in bound, bound
    assert str(tmp_path / "missing") not in prefix, "what does not exist is not made"
    work = prefix.index(str(WORKDIR))
    assert prefix[work - 3:work] == ["--size", str(8 * 2**20), "--tmpfs"], "the working copy is a bounded tmpfs"
    assert prefix[prefix.index("/dev/shm") - 3:prefix.index("/dev/shm")] == ["--size", str(4 * 2**20), "--tmpfs"]
    assert ("--unshare-user" in prefix) == (os.geteuid() != 0), "a user namespace unless root (setpriv then)"
    mapped = bwrap_prefix([shown], work_mb=8, shm_mb=4, mapped=True)
    assert "--unshare-user" not in mapped, "inside a namespace that maps a subordinate uid: setpriv drops to it"
    with pytest.raises(ValueError, match="working copy"):
        bwrap_prefix([Path("/")], work_mb=8, shm_mb=4)


#: Run inside the sandbox by the next test: what it can see, read and write.
_LOOK = """
import os, sys
shown, secret, *bound = sys.argv[1:]  # bound: the interpreter's folders, shown too
print(sorted(os.listdir(os.path.dirname(shown))))
print(open(os.path.join(shown, "kept.txt")).read())
for path, mode in ((secret, "r"), (os.path.join(shown, "kept.txt"), "a")):
    try:
        open(path, mode).write("changed") if mode == "a" else print(open(path).read())
    except OSError as error:
        print(type(error).__name__)
open("x", "w").write("x")
print(os.getcwd(), sorted(n for n in os.listdir("/tmp")  # minus the way to what is shown
                          if not any(p.startswith("/tmp/" + n + "/") for p in (shown, *bound))))
"""


def test_bwrap_shows_only_the_allow_list_read_only(tmp_path):
    require_bubblewrap()
    shown, secret = tmp_path / "shown", tmp_path / "secret.txt"
    shown.mkdir()
    (shown / "kept.txt").write_text("kept")
    secret.write_text("the instructor's")
    done = subprocess.run([*bwrap_prefix([shown, *PYTHON], work_mb=8, shm_mb=4), sys.executable, "-c", _LOOK, str(shown),
                           str(secret), *map(str, PYTHON)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["['shown']", "kept"], "only the allowed folder is there, read-only"
    assert lines[2:4] == ["FileNotFoundError", "OSError"], lines
    assert lines[4] == f"{WORKDIR} ['data', 'home', 'tmp', 'x']", "/tmp is the working copy, private"
    assert secret.read_text() == "the instructor's" and (shown / "kept.txt").read_text() == "kept"


_FILL = """
import os, sys
space = {}
exec(open(sys.argv[1]).read(), space)
reserve = space["Reserve"]("/tmp", 8)
open("/tmp/setup.bin", "wb").write(bytes(5 * 2**20))  # the setup's files, before the exercises
for _ in range(2):  # two exercises: each may write 8 MiB, through /tmp and HOME too
    reserve.refill()
    written = 0
    try:
        for i in range(40):
            with open(("/tmp/tmp", "/tmp/home")[i % 2] + f"/f{i}", "wb") as out:
                out.write(bytes(2**20))
            written += 1
    except OSError as error:
        print(written, space["filled"]("/tmp"), error.errno)
    for folder in ("/tmp/tmp", "/tmp/home"):
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
"""


def test_each_exercise_may_write_exactly_its_files_worth_whatever_the_setup_left(tmp_path):
    """300 MiB on disk went through many files under --file-mb 32: the working copy is a tmpfs now,
    and before each exercise the judge reserves all but --file-mb of what is free (inside/space.py)."""
    require_bubblewrap()
    inside = REPO / "course" / "grading" / "inside"
    done = subprocess.run([*bwrap_prefix([inside, *PYTHON], work_mb=40, shm_mb=4), sys.executable, "-c", _FILL,
                           str(inside / "space.py")], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "True", str(errno.ENOSPC)] * 2 or \
        done.stdout.split() == ["8", "True", str(errno.ENOSPC)] * 2, done.stdout


_GREEDY = """
import os, sys, time
sys.stdin.readline()  # placed
for _ in range(10):  # 10 x 40 MiB, and more processes than allowed
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        block = bytearray(40 * 2**20)
        block[::4096] = b"\\1" * len(range(0, len(block), 4096))
        time.sleep(5)
        os._exit(0)
time.sleep(3)
"""


def test_an_exercises_cgroup_bounds_its_processes_together_and_names_each_hit():
    cgroups = Cgroups.create(memory_mb=100, processes=4)
    require("cgroups", None if cgroups is not None else "no cgroup can be made here (an ordinary user on "
            "cgroup v1, or no delegated cgroup v2): limits are per process")
    try:
        hits = []
        for key, script in (("greedy", _GREEDY), ("modest", "import sys; sys.stdin.readline(); x = bytes(2**24)")):
            cgroups.begin(key)
            child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, text=True)
            cgroups.place(child.pid)
            child.communicate("go\n", timeout=60)
            hits.append(cgroups.end())
    finally:
        cgroups.remove()
    assert "the memory limit of 100 MiB for the exercise was reached" in hits[0], hits
    assert "the process limit of 4 for the exercise was reached" in hits[0], hits
    assert hits[1] is None, "the next exercise starts with fresh counters"
    assert not any(root.exists() for _, root in cgroups.roots.values()), "removed"


def test_setpriv_sets_the_judges_privileges_on_its_command_line():
    require_program("setpriv", "setpriv", "util-linux: apt-get install util-linux")
    prefix = setpriv_prefix(None)
    assert prefix[:2] == ["setpriv", "--no-new-privs"] and prefix[-1] == "--"
    status = subprocess.run([*prefix, "cat", "/proc/self/status"], capture_output=True, text=True,
                            timeout=30, check=True).stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["NoNewPrivs"].strip() == "1"
    assert int(fields["CapEff"], 16) == 0, "no capability, as root too"
    if os.geteuid() == 0:
        assert int(fields["CapBnd"], 16) == 0, "and none an exec could give back"
        own = setpriv_prefix(1_500_000_099)
        status = subprocess.run([*own, "cat", "/proc/self/status"], capture_output=True, text=True,
                                timeout=30, check=True).stdout
        assert "Uid:\t1500000099\t1500000099\t1500000099" in status and "Groups:\t\n" in status.replace(" ", "")


def test_the_file_guard_reads_only_regular_files_and_a_fifo_does_not_block_it(tmp_path):
    """A FIFO named like a notebook among the submissions must not hang the unsandboxed grader."""
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "ex01.json").write_text("{}")
    os.mkfifo(tmp_path / "student" / "ex01.ipynb")
    made = []
    worker = threading.Thread(target=lambda: made.append(FileGuard([(tmp_path, ("*",))])), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        os.close(os.open(tmp_path / "student" / "ex01.ipynb", os.O_WRONLY | os.O_NONBLOCK))
        raise AssertionError("the file guard blocked on a FIFO")
    guard = made[0]
    assert guard.changes() == []
    os.mkfifo(tmp_path / "student" / "planted")
    (tmp_path / "student" / "ex01.json").write_text("changed")
    assert sorted(guard.changes()) == [f"created {tmp_path / 'student' / 'planted'}",
                                       f"modified {tmp_path / 'student' / 'ex01.json'}"]
    guard.restore()
    assert guard.changes() == [] and (tmp_path / "student" / "ex01.json").read_text() == "{}"


def test_the_sandboxs_dev_shm_is_bounded():
    """Files in /dev/shm are memory no process limit counts: 300 MiB fitted there under --memory-mb 200."""
    require_bubblewrap()
    script = ("import errno\nwritten = 0\ntry:\n    with open('/dev/shm/fill', 'wb') as f:\n"
              "        for _ in range(64):\n            f.write(bytes(2**20))\n            f.flush()\n"
              "            written += 1\nexcept OSError as error:\n    assert error.errno == errno.ENOSPC\n"
              "print(written)")
    done = subprocess.run([*bwrap_prefix(PYTHON, work_mb=8, shm_mb=16), sys.executable, "-c", script],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert 8 <= int(done.stdout) <= 16, done.stdout


def test_an_ordinary_users_judges_get_subordinate_uids_of_their_own(tmp_path):
    """An ordinary user's judges run under uids of their own from /etc/subuid, never the instructor's."""
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    me = pwd.getpwuid(os.getuid()).pw_name
    subuid.write_text(f"# ranges\nsomeone:200000:65536\n{me}:300000:65536\n")
    subgid.write_text(f"{os.getuid()}:400000:1000\n")
    assert ranges(subuid, {me, str(os.getuid())}) == [(300000, 65536)]
    found, why = find_subordinate(os.getuid(), (subuid, subgid))
    if shutil.which("newuidmap") is None:
        assert found is None and "newuidmap" in why
    else:
        assert found == Subordinate(300000, 65536, 400000, 1000) and why == ""
        assert find_subordinate(os.getuid(), (subuid, tmp_path / "absent"))[0] is None
    one, two = (judge_uid(Subordinate(300000, 65536, 400000, 1000)) for _ in range(2))
    assert one.inner == two.inner == SANDBOX_UID and one.host != two.host, "each judge a uid of its own"
    assert all(300000 <= uid.host < 365536 for uid in (one, two))
    assert one.userns[:3] == ("unshare", "--user", "--map-root-user") and one.userns[-1] == "--"
    assert f"--map-users={one.host},{SANDBOX_UID},1" in one.userns
    assert setpriv_prefix(one.inner)[2:4] == ["--reuid", str(SANDBOX_UID)], "the judge drops to it inside"
    subgid.write_text(f"{me}:400000\n")
    with pytest.raises(ValueError, match=f"{subgid} row 1: expected NAME:START:COUNT"):
        ranges(subgid, {me})


#: Run inside the sandbox by the next test, from the working copy: a checkout bound below /tmp.
_BOUND_BELOW_TMP = """
import os, sys
checkout, repo = sys.argv[1:]
sys.path[:0] = ["/tmp", checkout, repo]
from course.grading.inside.processes import preload
from course.grading.inside.space import listing
open("/tmp/written_by_setup.py", "w").write("raise AssertionError('imported before its setup cell')")
preload(["from_the_checkout", "written_by_setup"])
print("from_the_checkout" in sys.modules, "written_by_setup" in sys.modules)
found = listing("/tmp")
print(checkout in found, any(p.startswith(checkout + "/") for p in found), "/tmp/written_by_setup.py" in found)
"""


def test_a_checkout_below_tmp_is_the_repositorys_not_the_working_copys():
    """A CI clone lies below /tmp: the sandbox binds its allowed folders into the working copy (its
    /tmp), read-only. The judge's zygote still preloads their modules, and the judge's listings of the
    working copy (before and after every exercise) do not walk them: a clone's venv below /tmp (gigabytes)
    would otherwise be walked twice per exercise."""
    require_bubblewrap()
    checkout = Path(tempfile.mkdtemp(dir="/tmp", prefix="clone-"))
    try:
        (checkout / "from_the_checkout.py").write_text("VALUE = 1\n")
        done = subprocess.run([*bwrap_prefix([checkout, REPO / "course", *PYTHON], work_mb=8, shm_mb=4),
                               sys.executable, "-c", _BOUND_BELOW_TMP, str(checkout), str(REPO)],
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        shutil.rmtree(checkout)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True", "False", "True"], done.stdout
