"""Tests for common/paths.py: the repository and data folders, from any working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.paths import chapters_dir, default_data_root, find_repo_root, repo_root

REPO = Path(__file__).resolve().parents[2]


def test_found_from_the_package_and_from_any_folder_inside(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPANION_REPO", raising=False)
    monkeypatch.chdir(tmp_path)  # outside the repository: found from the package's folder
    assert repo_root() == REPO and chapters_dir() == REPO / "chapters"
    assert find_repo_root(REPO / "common" / "ddp") == REPO
    assert find_repo_root(tmp_path) is None


def test_companion_repo_overrides_and_a_wrong_one_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_REPO", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="COMPANION_REPO"):
        repo_root()


def test_data_root_follows_companion_data(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_DATA", str(tmp_path / "d"))
    assert default_data_root() == (tmp_path / "d").resolve()
    monkeypatch.delenv("COMPANION_DATA")
    assert default_data_root() == REPO / "data"


def test_display_path_is_relative_inside_the_repository_and_short_outside(tmp_path):
    from common.paths import display_path, repo_root

    assert display_path(repo_root() / "chapters" / "x.ipynb") == "chapters/x.ipynb"
    assert display_path(tmp_path / "a" / "b.txt") == "…/a/b.txt"
