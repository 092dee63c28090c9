"""Tests for common/fsdp/lock.py: one writer per checkpoint folder, the holder named, stale
locks told from live ones (this host: pid and start time; other hosts: the torchrun job)."""

from __future__ import annotations

import json
import os
import socket

import psutil
import pytest

from common.fsdp.integrity import CheckpointError
from common.fsdp.lock import (
    LOCK_FILE,
    Holder,
    acquire_lock,
    read_holder,
    release_lock,
    takeover_reason,
    this_process,
)


def _parent() -> Holder:
    """A live process on this host that is not this one: pytest's parent."""
    return Holder(os.getppid(), socket.gethostname(), "theirs", "",
                  psutil.Process(os.getppid()).create_time())


def _dead_pid() -> int:
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid += 1
    return pid


def test_the_lock_names_this_process_and_is_released_by_it_only(tmp_path):
    path = acquire_lock(tmp_path / "ckpt", "run1")
    assert path == tmp_path / "ckpt" / LOCK_FILE
    holder = read_holder(path)
    assert (holder.pid, holder.host, holder.run_id) == (os.getpid(), socket.gethostname(), "run1")
    path.write_text(json.dumps(_parent().__dict__))
    release_lock(tmp_path / "ckpt")  # not ours: left alone
    assert read_holder(path).run_id == "theirs"
    path.write_text(json.dumps(this_process("run1").__dict__))
    release_lock(tmp_path / "ckpt")
    assert not path.exists()


def test_a_live_holder_is_refused_by_name(tmp_path):
    (tmp_path / LOCK_FILE).write_text(json.dumps(_parent().__dict__))
    with pytest.raises(CheckpointError, match=rf"another run writes checkpoints here: pid "
                                              rf"{os.getppid()} on .* \(run theirs"):
        acquire_lock(tmp_path, "mine")
    elsewhere = Holder(1, "another-host", "theirs", "job7", 0.0)
    (tmp_path / LOCK_FILE).write_text(json.dumps(elsewhere.__dict__))
    with pytest.raises(CheckpointError, match="ran on another host, delete"):
        acquire_lock(tmp_path, "mine")


@pytest.mark.parametrize(("holder", "reason"), [
    (lambda me: Holder(_dead_pid(), me.host, "old", "", me.started), "no process"),
    (lambda me: Holder(os.getppid(), me.host, "old", "", 0.0), "no process"),  # pid reused
    (lambda me: Holder(me.pid, me.host, "old", "", me.started), "earlier run in this process"),
    (lambda me: Holder(7, "another-host", "old", "job7", 0.0), "earlier worker group"),
    (lambda me: Holder(7, "another-host", "old", "job8", 0.0), ""),
    (lambda me: _parent(), ""),
])
def test_stale_reason(holder, reason, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    me = this_process("new")
    found = takeover_reason(holder(me), me)
    assert (reason in found) if reason else found == ""


def test_a_stale_lock_is_taken_over_with_a_note(tmp_path, capsys):
    me = this_process("x")
    dead = Holder(_dead_pid(), me.host, "old", "", me.started)
    (tmp_path / LOCK_FILE).write_text(json.dumps(dead.__dict__))
    acquire_lock(tmp_path, "new")
    assert read_holder(tmp_path / LOCK_FILE).run_id == "new"
    assert f"took over the stale lock {tmp_path / LOCK_FILE} of pid {dead.pid}" in \
        capsys.readouterr().err


def test_a_garbled_lock_file_is_named(tmp_path):
    (tmp_path / LOCK_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match=rf"{LOCK_FILE}: unreadable lock file"):
        acquire_lock(tmp_path, "new")
