"""course.publishing.bootstrap: the Colab/Kaggle badge and install cells, on copies of chapters in tmp_path."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import sys
import types
from pathlib import Path

import jupytext
import nbformat
import polib
import pytest

from course.publishing.bootstrap import (
    BADGE_START,
    Repository,
    badge_source,
    bootstrap,
    bootstrap_source,
    project_urls,
    repository,
)
from course.publishing.notebooks import build, main
from course.publishing.translate import build_notebook, load_po, po_path, problems_of, update_po

REPO = Path(__file__).resolve().parents[2]
CHAPTER = "01_pytorch_basics"
EXERCISE = "ex01_pytorch_basics"
FORK = "https://github.com/someone/companion-fork"


def test_the_repository_url_is_declared_once_and_the_others_derive_from_it():
    urls = project_urls(REPO)
    assert set(urls) >= {"Homepage", "Repository", "Documentation", "Issues"}
    for name, url in urls.items():
        assert url.startswith(urls["Repository"]), f"{name} = {url} is not under Repository"
    repo = repository(REPO)
    assert repo.url == urls["Repository"]
    assert f"git+{repo.url}\"" in bootstrap_source(repo)
    assert repo.colab("chapters/x.ipynb") == (f"https://colab.research.google.com/github/"
                                             f"{repo.owner}/{repo.name}/blob/main/chapters/x.ipynb")


def _run_bootstrap_cell(repo: Repository, monkeypatch) -> tuple[list, str]:
    """Execute the bootstrap cell with the installer patched; ``(installer calls, stdout)``."""
    calls = []
    monkeypatch.setattr(subprocess, "check_call", lambda *args, **kwargs: calls.append(args))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(bootstrap_source(repo), "<bootstrap cell>", "exec"), {})
    return calls, out.getvalue()


@pytest.fixture
def local(monkeypatch):
    """Neither Colab nor Kaggle, whatever machine the tests run on."""
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    return monkeypatch


def test_a_local_run_installs_nothing_and_says_so(local):
    calls, out = _run_bootstrap_cell(repository(REPO), local)
    assert calls == []
    assert out.strip().startswith("Local run: nothing installed") and len(out.splitlines()) == 1


@pytest.mark.parametrize("where", ["colab", "kaggle"])
def test_colab_and_kaggle_install_this_repository(local, where):
    if where == "colab":
        local.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        local.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    repo = Repository("someone", "companion-fork")
    calls, out = _run_bootstrap_cell(repo, local)
    assert calls == [([sys.executable, "-m", "pip", "install", "--quiet",
                       f"torch-pipelines-companion @ git+{FORK}"],)]
    assert out.startswith("Installed torch-pipelines-companion @ git+" + FORK)


@pytest.fixture
def checkout(tmp_path):
    """A copy of chapter 1, exercise 1 and their .po files, in a checkout that names FORK."""
    text = (REPO / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text.replace(str(repository(REPO).url), FORK))
    (tmp_path / "chapters" / "exercises" / "solutions").mkdir(parents=True)
    (tmp_path / "chapters" / "zh" / "po").mkdir(parents=True)
    for stem, folder in ((CHAPTER, "chapters"), (EXERCISE, "chapters/exercises/solutions")):
        for suffix in (".ipynb", ".py"):
            shutil.copy2(REPO / folder / (stem + suffix), tmp_path / folder / (stem + suffix))
        shutil.copy2(REPO / "chapters" / "zh" / "po" / f"{stem}.po",
                     tmp_path / "chapters" / "zh" / "po" / f"{stem}.po")
    _strip_standard_cells(tmp_path / "chapters")
    # The twin is the newer file, as after an author's edit: bootstrap reads the newer twin.
    (tmp_path / "chapters" / f"{CHAPTER}.py").touch()
    return tmp_path


def _strip_standard_cells(chapters: Path) -> None:
    """The copied chapter as it was before it had a badge and a bootstrap cell (po included)."""
    ours = (badge_source(repository(REPO), f"{CHAPTER}.ipynb"), bootstrap_source(repository(REPO)))
    path = chapters / f"{CHAPTER}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if c.source not in ours]
    nbformat.write(nb, path)
    path.with_suffix(".py").write_text(jupytext.writes(nb, fmt="py:percent"))
    po = update_po(f"{CHAPTER}.ipynb", nb, load_po(f"{CHAPTER}.ipynb", chapters))
    for entry in [e for e in po if e.obsolete]:
        po.remove(entry)
    po.save(str(po_path(f"{CHAPTER}.ipynb", chapters)))


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_bootstrap_inserts_the_cells_after_the_title_and_keeps_every_translation(checkout, capsys):
    chapters = checkout / "chapters"
    before = nbformat.read(chapters / f"{CHAPTER}.ipynb", as_version=4)
    old_po = load_po(f"{CHAPTER}.ipynb", chapters)
    exercise = _files(chapters / "exercises") | {"po": (chapters / "zh/po" /
                                                        f"{EXERCISE}.po").read_bytes()}
    assert main(["bootstrap", str(chapters / f"{CHAPTER}.py"),
                 str(chapters / "exercises" / "solutions" / f"{EXERCISE}.py")]) == 0
    assert "skipped" in capsys.readouterr().out, "exercises are left alone, and say so"
    assert _files(chapters / "exercises") | {"po": (chapters / "zh/po" /
                                                    f"{EXERCISE}.po").read_bytes()} == exercise

    nb = jupytext.read(chapters / f"{CHAPTER}.py")
    fork = Repository("someone", "companion-fork")
    assert [c.source for c in nb.cells[:3]] == [
        before.cells[0].source, badge_source(fork, f"{CHAPTER}.ipynb"), bootstrap_source(fork)]
    assert f"{FORK.replace('https://github.com/', 'github/')}/blob/main/chapters/{CHAPTER}" \
        in nb.cells[1].source
    assert [c.source for c in nb.cells[3:]] == [c.source for c in before.cells[1:]]

    po = load_po(f"{CHAPTER}.ipynb", chapters)
    assert problems_of(f"{CHAPTER}.ipynb", nb, po) == [], "every cell still translated"
    assert {e.msgstr for e in old_po if e.msgstr} < {e.msgstr for e in po if not e.obsolete}
    zh = build_notebook(f"{CHAPTER}.ipynb", nb, po)
    assert zh.cells[1].source == badge_source(fork, f"{CHAPTER}.ipynb", zh=True)
    assert f"/blob/main/chapters/zh/{CHAPTER}.ipynb" in zh.cells[1].source
    assert zh.cells[0].source == old_po.find(before.cells[0].source).msgstr

    written = _files(checkout)
    assert main(["bootstrap", str(chapters / f"{CHAPTER}.py")]) == 0
    assert "already current" in capsys.readouterr().out
    assert _files(checkout) == written, "a second run changes nothing"


def _tiny_chapter(chapters: Path, repo: Repository) -> Path:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Tiny chapter"),
        nbformat.v4.new_markdown_cell(badge_source(repo, "99_tiny.ipynb")),
        nbformat.v4.new_code_cell(bootstrap_source(repo)),
        nbformat.v4.new_markdown_cell("Show a number."),
        nbformat.v4.new_code_cell("print(6 * 7)")])
    path = chapters / "99_tiny.py"
    jupytext.write(nb, path, fmt="py:percent")
    return path


def test_build_refreshes_cells_that_drifted_and_runs_the_local_branch(checkout):
    chapters = checkout / "chapters"
    path = _tiny_chapter(chapters, Repository("old-owner", "old-name"))
    build(path, timeout=120)
    nb = nbformat.read(path.with_suffix(".ipynb"), as_version=4)
    fork = Repository("someone", "companion-fork")
    assert nb.cells[1].source == badge_source(fork, "99_tiny.ipynb")
    assert nb.cells[2].source == bootstrap_source(fork)
    assert nb.cells[2].outputs[0]["text"].startswith("Local run: nothing installed")
    assert [c.execution_count for c in nb.cells if c.cell_type == "code"] == [1, 2]
    po = polib.pofile(str(chapters / "zh" / "po" / "99_tiny.po"))
    assert po.find(badge_source(fork, "99_tiny.ipynb")).msgstr == \
        badge_source(fork, "99_tiny.ipynb", zh=True)


def test_build_adds_no_cells_where_there_are_none_and_refuses_exercises(checkout):
    chapters = checkout / "chapters"
    nb = jupytext.read(chapters / f"{CHAPTER}.py")
    assert not bootstrap(chapters / f"{CHAPTER}.py", nb, insert=False)
    assert not any(BADGE_START in c.source for c in nb.cells)
    with pytest.raises(ValueError, match="exercise notebooks get no badge"):
        bootstrap(chapters / "exercises" / "solutions" / f"{EXERCISE}.py", nb)
    with pytest.raises(ValueError, match="exercise notebooks get no badge"):
        bootstrap(chapters / "exercises" / f"{EXERCISE}.ipynb", nb)  # a student version


def test_a_repository_url_that_is_not_github_is_refused(tmp_path):
    text = (REPO / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(
        text.replace(f'Repository = "{repository(REPO).url}"', 'Repository = "https://example.org/x"'))
    with pytest.raises(ValueError, match="Repository = 'https://example.org/x'"):
        repository(tmp_path)
