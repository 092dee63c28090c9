"""common/atomic_io.py: a file is written whole or not at all; a writer that dies mid-write leaves the old file."""

from __future__ import annotations

import pytest

from common import atomic_io
from common.atomic_io import temporary_files, write_atomically, write_text_atomically


class Crash(Exception):
    """A writer dying mid-write."""


def _half_then_crash(file) -> None:
    file.write(b"half of the new")
    raise Crash


def test_a_crash_mid_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "grades.json"
    path.write_text("the old report")
    with pytest.raises(Crash):
        write_atomically(path, _half_then_crash)
    assert path.read_text() == "the old report"
    assert temporary_files(path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["grades.json"]


def test_a_crash_before_the_rename_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "snap.pt"
    path.write_bytes(b"old")

    def killed(*_):
        raise Crash

    monkeypatch.setattr(atomic_io.os, "replace", killed)
    with pytest.raises(Crash):
        write_text_atomically(path, "new")
    assert path.read_bytes() == b"old" and temporary_files(path) == []


def test_a_write_replaces_the_file_whole_and_makes_its_folder(tmp_path):
    path = tmp_path / "new" / "folder" / "grades.csv"
    assert write_text_atomically(path, "a,b\n1,2\n") == path
    assert path.read_text() == "a,b\n1,2\n"
    write_text_atomically(path, "c\n")
    assert path.read_text() == "c\n" and temporary_files(path) == []


def test_a_text_that_cannot_be_encoded_touches_no_file(tmp_path):
    path = tmp_path / "feedback.ipynb"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomically(path, "a lone surrogate \udc80")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["feedback.ipynb"]


def test_stale_temporaries_are_removed_only_when_asked(tmp_path):
    path = tmp_path / "snap.pt"
    stale = tmp_path / ".snap.pt.abc123.tmp"
    other = tmp_path / ".other.pt.abc123.tmp"
    for leftover in (stale, other):
        leftover.write_bytes(b"a killed writer's half")
    write_text_atomically(path, "one")
    assert temporary_files(path) == [stale]
    write_atomically(path, lambda file: file.write(b"two"), remove_stale=True)
    assert temporary_files(path) == [] and other.exists() and path.read_bytes() == b"two"
