"""course.grading.sandbox: the file guard reports and undoes changes; the sandbox is probed, not assumed."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

import pytest

from course.grading.sandbox import FileGuard, bwrap_prefix, choose_sandbox, setpriv_prefix


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


def test_bwrap_prefix_hides_folders_and_binds_only_the_working_copy(tmp_path):
    work, hidden = tmp_path / "work", tmp_path / "secret"
    prefix = bwrap_prefix(work, [hidden])
    assert prefix[0] == "bwrap" and prefix[-1] == "--"
    assert prefix[prefix.index(str(hidden)) - 1] == "--tmpfs", "a hidden folder is an empty tmpfs"
    assert prefix[prefix.index("--bind"):][:3] == ["--bind", str(work), str(work)]
    assert prefix.count("--bind") == 1, "only the working copy may be writable"


@pytest.mark.skipif(choose_sandbox("auto")[0] != "bwrap", reason="bubblewrap does not work here")
def test_bwrap_makes_everything_but_the_working_copy_read_only(tmp_path):
    work, hidden, elsewhere = tmp_path / "work", tmp_path / "hidden", tmp_path / "elsewhere.txt"
    work.mkdir()
    hidden.mkdir()
    (hidden / "kept.txt").write_text("kept")
    script = "\n".join([
        "from pathlib import Path",
        f"Path({str(work)!r}, 'ok.txt').write_text('ok')",
        f"print(sorted(p.name for p in Path({str(hidden)!r}).iterdir()))",
        f"Path({str(hidden)!r}, 'kept.txt').write_text('changed')  # lands in a throwaway tmpfs",
        f"Path({str(elsewhere)!r}).write_text('escaped')",
    ])
    done = subprocess.run([*bwrap_prefix(work, [hidden]), "python3", "-c", script],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (work / "ok.txt").read_text() == "ok", done.stderr
    assert done.stdout.strip() == "[]", "a hidden folder must look empty inside the sandbox"
    assert done.returncode != 0 and "Read-only file system" in done.stderr, done.stderr
    assert (hidden / "kept.txt").read_text() == "kept" and not elsewhere.exists()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is not installed")
def test_setpriv_sets_the_judges_privileges_on_its_command_line():
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
    """A FIFO named like a notebook among the submissions hung the unsandboxed grader (issue 29)."""
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


@pytest.mark.skipif(choose_sandbox("auto")[0] != "bwrap", reason="bubblewrap does not work here")
def test_the_sandboxs_dev_shm_is_bounded(tmp_path):
    """Files in /dev/shm are memory no process limit counts: 300 MiB fitted there under --memory-mb 200."""
    work = tmp_path / "work"
    work.mkdir()
    script = ("import errno\nwritten = 0\ntry:\n    with open('/dev/shm/fill', 'wb') as f:\n"
              "        for _ in range(64):\n            f.write(bytes(2**20))\n            f.flush()\n"
              "            written += 1\nexcept OSError as error:\n    assert error.errno == errno.ENOSPC\n"
              "print(written)")
    done = subprocess.run([*bwrap_prefix(work, [], shm_mb=16), "python3", "-c", script],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert 8 <= int(done.stdout) <= 16, done.stdout
