"""Where the repository and the data are: the one place every module and tool asks.

``common`` works from an editable install (the usual case), from a plain ``pip install .``
and from any working directory: the repository is found from this package's folder, else
from the working directory upwards, else from ``$COMPANION_REPO``; the data live under
``$COMPANION_DATA`` if set, else ``<repository>/data``, else a per-user cache folder.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_NAME = "torch-pipelines-companion"


def is_repo_root(folder: Path) -> bool:
    """True if ``folder`` is a checkout of this project (its pyproject.toml and chapters/).

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    pyproject = folder / "pyproject.toml"
    return ((folder / "chapters").is_dir() and pyproject.is_file()
            and f'name = "{PROJECT_NAME}"' in pyproject.read_text(encoding="utf-8"))


def find_repo_root(start: Path | None = None) -> Path | None:
    """The repository checkout, or None when there is none (an installed package elsewhere).

    Args:
        start: Look here and upwards first (default: ``$COMPANION_REPO``, then the folder of
            this package, then the working directory).

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    if start is None and os.environ.get("COMPANION_REPO"):
        start = Path(os.environ["COMPANION_REPO"])
    starts = [start] if start is not None else [Path(__file__).parent, Path.cwd()]
    for base in starts:
        for folder in [base.expanduser().resolve(), *base.expanduser().resolve().parents]:
            if is_repo_root(folder):
                return folder
    return None


def repo_root(start: Path | None = None) -> Path:
    """The repository checkout; raises a clear error where there is none.

    Raises:
        FileNotFoundError: Saying how to point the tools at a checkout.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    root = find_repo_root(start)
    if root is None:
        where = start or f"{Path(__file__).parent} or {Path.cwd()}"
        raise FileNotFoundError(f"no checkout of {PROJECT_NAME} at or above {where}: run from "
                                "inside the repository, or set COMPANION_REPO=/path/to/it")
    return root


def default_data_root() -> Path:
    """``$COMPANION_DATA`` if set, else ``<repo>/data``, else ``~/.cache/torch-pipelines-companion``.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    if os.environ.get("COMPANION_DATA"):
        return Path(os.environ["COMPANION_DATA"]).expanduser().resolve()
    root = find_repo_root()
    return root / "data" if root is not None else Path.home() / ".cache" / PROJECT_NAME


def chapters_dir(root: Path | None = None) -> Path:
    """``<repo>/chapters`` (the notebooks the course tools build, grade and render).

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    return (root or repo_root()) / "chapters"


def display_path(path: str | os.PathLike) -> str:
    """``path`` as a reader should see it: relative to the repository when inside it.

    Outputs stored in committed notebooks must not carry the build machine's folders;
    paths outside the repository keep only their last two parts, after ``…/``.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    path = Path(os.path.abspath(Path(path).expanduser()))  # keep symlinks: a venv's python
    root = find_repo_root()
    if root is not None and path.is_relative_to(root):
        return path.relative_to(root).as_posix() or "."
    return "…/" + "/".join(path.parts[-2:])
