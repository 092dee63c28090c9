"""The standard cells after a chapter's title: Colab/Kaggle badges and the guarded bootstrap.

Every chapter notebook (``chapters/*.ipynb``; not the graded exercises of ``chapters/exercises/``) carries,
right after its title cell:

1. a markdown cell with "Open in Colab" and "Open in Kaggle" badges for this notebook (the
   Chinese edition's own translation of it links to ``chapters/zh/<notebook>``), and
2. the one install cell that STYLE.md allows: it runs ``pip install`` of this repository only
   inside Colab (``"google.colab" in sys.modules``) or Kaggle (``$KAGGLE_KERNEL_RUN_TYPE``);
   a local run prints one line saying that nothing was installed.

Both are generated from ``[project.urls] Repository`` of ``pyproject.toml`` (the repository URL
is declared there once), so they cannot drift: ``python -m course.publishing.notebooks bootstrap`` inserts
or refreshes them, and ``build`` refreshes them wherever they are present.
``tests/test_notebooks.py`` accepts that install cell only in exactly the form
``bootstrap_source`` writes.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import polib

from common.paths import PROJECT_NAME, find_repo_root, is_repo_root
from course.assignments import is_exercise_notebook
from course.publishing.translate import context, load_po, po_path, scripts_of, update_po
from course.publishing.translate_comments import is_comment_context

#: The first line of each standard cell: how an existing one is recognised (and refreshed).
BADGE_START = "[![Open In Colab]"
BOOTSTRAP_START = "# Colab and Kaggle only: install this companion's package"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
KAGGLE_BADGE = "https://kaggle.com/static/images/open-in-kaggle.svg"
GITHUB = re.compile(r"^https://github\.com/(?P<owner>[\w.-]+)/(?P<name>[\w.-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class Repository:
    """Where the project is published: a GitHub ``owner/name`` and the branch the badges open."""

    owner: str
    name: str
    branch: str = "main"

    @property
    def url(self) -> str:
        return f"https://github.com/{self.owner}/{self.name}"

    def colab(self, path: str) -> str:
        """The Colab address of ``path`` (relative to the repository root)."""
        return f"https://colab.research.google.com/github/{self.owner}/{self.name}/blob/{self.branch}/{path}"

    def kaggle(self, path: str) -> str:
        """The Kaggle address that imports ``path`` from GitHub into a new notebook."""
        return f"https://kaggle.com/kernels/welcome?src={self.url}/blob/{self.branch}/{path}"


def project_urls(root: Path | None = None) -> dict[str, str]:
    """``[project.urls]`` of ``<root>/pyproject.toml``, else of the installed package's metadata.

    ``root`` defaults to the checkout (``common.paths.find_repo_root``); with no checkout the
    ``Project-URL`` entries of the installed distribution are used.
    """
    root = root if root is not None else find_repo_root()
    try:
        import tomllib  # Python 3.11+; on 3.10 the installed (editable) metadata is read
    except ModuleNotFoundError:
        tomllib = None
    if tomllib is not None and root is not None and (root / "pyproject.toml").is_file():
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        return dict(project.get("urls", {}))
    entries = importlib.metadata.metadata(PROJECT_NAME).get_all("Project-URL") or []
    return dict(entry.split(", ", 1) for entry in entries)


def repository(root: Path | None = None) -> Repository:
    """The ``Repository`` URL of ``project_urls`` as owner and name.

    Raises:
        ValueError: If there is no ``Repository`` URL or it is not ``https://github.com/<o>/<n>``.
    """
    urls = project_urls(root)
    match = GITHUB.match(urls.get("Repository", ""))
    if match is None:
        raise ValueError(f"pyproject.toml [project.urls] Repository = {urls.get('Repository')!r}: "
                         "expected https://github.com/<owner>/<name> (badges and the Colab "
                         "bootstrap are derived from it)")
    return Repository(match["owner"], match["name"])


def badge_source(repo: Repository, notebook: str, *, zh: bool = False) -> str:
    """The badge cell of ``chapters/<notebook>`` (English) or ``chapters/zh/<notebook>`` (zh)."""
    path = f"chapters/zh/{notebook}" if zh else f"chapters/{notebook}"
    badges = (f"{BADGE_START}({COLAB_BADGE})]({repo.colab(path)}) "
              f"[![Open In Kaggle]({KAGGLE_BADGE})]({repo.kaggle(path)})")
    if zh:
        return (f"{badges}\n在 Colab 或 Kaggle 上运行？下一个单元格会在那里安装本项目的 `common` 包"
                "（在 Kaggle 上请先在笔记本设置中打开 Internet）；在你自己的机器上，它什么也不安装。")
    return (f"{badges}\nRunning in Colab or Kaggle? The next cell installs this companion's "
            "package `common` there (on Kaggle, first switch Internet on in the notebook's "
            "settings); on your own machine it installs nothing.")


#: The Chinese of the install cell's comments (the cell is the same in every chapter, so its
#: translation is too; ``refresh_translation`` fills it in like the badge's).
BOOTSTRAP_COMMENTS_ZH = {
    "Colab and Kaggle only: install this companion's package (a local run has it).":
        "仅限 Colab 和 Kaggle：安装本配套仓库的包（本地运行时已经装好）。",
    "so that `import common` below finds the new package": "让下面的 `import common` 能找到新装的包",
}


def bootstrap_source(repo: Repository) -> str:
    """The guarded install cell: ``pip install`` of the repository in Colab or Kaggle only."""
    return f'''{BOOTSTRAP_START} (a local run has it).
import os
import sys

if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    import importlib
    import subprocess

    package = "{PROJECT_NAME} @ git+{repo.url}"
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", package])
    importlib.invalidate_caches()  # so that `import common` below finds the new package
    print(f"Installed {{package}}")
else:
    print("Local run: nothing installed (this environment already has `common`)")'''


def chapters_of(notebook: Path) -> tuple[Path, str]:
    """``(chapters folder, notebook path relative to it)`` of a chapter's .ipynb or .py twin.

    Raises:
        ValueError: For an exercise notebook (graded: no bootstrap) or one outside chapters/.
    """
    notebook = Path(notebook).resolve()
    if is_exercise_notebook(notebook):
        raise ValueError(f"{notebook.name}: exercise notebooks get no badge or bootstrap cell "
                         "(graded by course.grading; learners open the student versions in "
                         "chapters/exercises/)")
    if notebook.parent.name != "chapters":
        raise ValueError(f"{notebook}: not a chapter notebook (expected chapters/<name>.ipynb)")
    return notebook.parent, notebook.with_suffix(".ipynb").name


def _place(nb: nbformat.NotebookNode, index: int, cell: nbformat.NotebookNode, start: str,
           *, insert: bool) -> bool:
    """Put ``cell`` at ``index``: refresh a standard cell found there, else insert it."""
    present = len(nb.cells) > index and nb.cells[index].cell_type == cell.cell_type \
        and nb.cells[index].source.startswith(start)
    if present:
        if nb.cells[index].source == cell.source:
            return False
        nb.cells[index].source = cell.source
        if cell.cell_type == "code":
            nb.cells[index].outputs, nb.cells[index].execution_count = [], None
        return True
    if insert:
        nb.cells.insert(index, cell)
    return insert


def has_standard_cells(nb: nbformat.NotebookNode) -> bool:
    """True when the badge and bootstrap cells follow the title (whatever URL they hold)."""
    return len(nb.cells) > 2 and nb.cells[1].source.startswith(BADGE_START) \
        and nb.cells[2].cell_type == "code" and nb.cells[2].source.startswith(BOOTSTRAP_START)


def apply_standard_cells(nb: nbformat.NotebookNode, repo: Repository, notebook: str, *,
                         insert: bool = True) -> bool:
    """Insert (``insert=True``) or refresh the badge and bootstrap cells after the title cell.

    Returns:
        True if ``nb`` changed.

    Raises:
        ValueError: If the first cell is not the markdown title cell.
    """
    if not nb.cells or nb.cells[0].cell_type != "markdown" or not nb.cells[0].source.startswith("# "):
        raise ValueError(f"{notebook}: the first cell must be the markdown title ('# ...')")
    if not insert and not has_standard_cells(nb):
        return False
    changed = _place(nb, 1, nbformat.v4.new_markdown_cell(badge_source(repo, notebook)),
                     BADGE_START, insert=insert)
    return _place(nb, 2, nbformat.v4.new_code_cell(bootstrap_source(repo)), BOOTSTRAP_START,
                  insert=insert) or changed


def refresh_translation(nb: nbformat.NotebookNode, repo: Repository, notebook: str,
                        chapters: Path) -> polib.POFile:
    """Update ``chapters/zh/po/<stem>.po`` for ``nb`` and give its badge cell the zh badge.

    The same update as ``python -m course.publishing.translate extract`` (translations follow their
    cells to the new indices), plus a ready translation of the badge cell that links to the
    Chinese notebook and of the install cell's comments. Returns the saved file.
    """
    po = update_po(notebook, nb, load_po(notebook, chapters), scripts_of(notebook, chapters))
    badge = {e.msgctxt: e for e in po if not e.obsolete}.get(context(notebook, 1))
    if badge is not None and badge.msgid.startswith(BADGE_START):
        badge.msgstr, badge.flags, badge.previous_msgid = \
            badge_source(repo, notebook, zh=True), [], None
    for entry in po:
        if (not entry.obsolete and is_comment_context(entry.msgctxt)
                and entry.msgid in BOOTSTRAP_COMMENTS_ZH):
            entry.msgstr, entry.flags, entry.previous_msgid = \
                BOOTSTRAP_COMMENTS_ZH[entry.msgid], [], None
    path = po_path(notebook, chapters)
    path.parent.mkdir(parents=True, exist_ok=True)
    po.save(str(path))
    return po


def bootstrap(notebook_path: Path, nb: nbformat.NotebookNode, *, insert: bool = True,
              root: Path | None = None) -> bool:
    """Apply the standard cells to a chapter ``nb`` read from ``notebook_path``; refresh its .po.

    ``root`` (default: the folder above ``chapters/`` when it is a checkout, else the
    installed metadata) is where ``pyproject.toml`` gives the repository URL. Returns True
    if ``nb`` changed; the .po is refreshed whenever ``nb`` has the standard cells.
    """
    chapters, notebook = chapters_of(notebook_path)
    if root is None and is_repo_root(chapters.parent):
        root = chapters.parent
    repo = repository(root)
    changed = apply_standard_cells(nb, repo, notebook, insert=insert)
    if has_standard_cells(nb) and po_path(notebook, chapters).parent.is_dir():
        refresh_translation(nb, repo, notebook, chapters)
    return changed
