"""Print constraints.txt: the exact version of every installed distribution the project depends on.

`make constraints` runs it in .venv after a green `make test`. The roots are the requirement files
(requirements-dev.txt, which includes requirements.txt: every extra of pyproject.toml); from them the
installed distributions' own requirements are followed (markers evaluated here, extras included), so a
package installed by hand, pip itself and the project's own editable install are left out.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PROJECT = "torch-pipelines-companion"
HEADER = """\
# The exact versions of a green `make test` (Python {python}, {system}): `make constraints` writes this file
# from .venv; CI installs with it (`make install CONSTRAINTS=constraints.txt`), the weekly job without it.
# Without CONSTRAINTS, `make install` resolves the requirement files' ranges to the newest releases.
"""


def root_requirements(path: Path) -> list[Requirement]:
    """The requirements of a requirements file, following ``-r`` includes."""
    found = []
    for line in path.read_text().splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r"):
            found += root_requirements(path.parent / line[2:].strip())
        elif not line.startswith("-"):
            found.append(Requirement(line))
    return found


def closure(roots: list[Requirement]) -> dict[str, str]:
    """Canonical name -> installed version of every distribution the roots need here, the project left out."""
    versions: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(root, "") for root in roots]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            sys.exit(f"{requirement}: required but not installed; run `make install` first")
        if name != PROJECT:
            versions[name] = distribution.version
        for line in distribution.requires or []:
            try:
                needed = Requirement(line)
            except InvalidRequirement:
                continue
            for wanted in ("", *requirement.extras):
                todo.append((needed, wanted))
    return versions


def pinned(path: Path) -> dict[str, str]:
    """Canonical name -> version of a constraints file's ``name==version`` lines."""
    found = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split("#", 1)[0].split("==", 1)
            found[canonicalize_name(name.strip())] = version.strip()
    return found


def changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Markdown rows ``| name | old | new |`` of every version that differs (``—`` where absent)."""
    return [f"| {name} | {old.get(name, '—')} | {new.get(name, '—')} |"
            for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", type=Path, metavar="FILE",
                        help="print instead what differs from FILE (a markdown table; the weekly job's report)")
    args = parser.parse_args(argv)
    versions = closure(root_requirements(REPO / "requirements-dev.txt"))
    if args.compare:
        if not args.compare.is_file():
            parser.error(f"--compare {args.compare}: no such file")
        rows = changes(pinned(args.compare), versions)
        print(f"{len(rows)} of the project's dependencies differ from {args.compare}:")
        if rows:
            print("\n| package | pinned | installed |\n| --- | --- | --- |")
            print("\n".join(rows))
        return
    print(HEADER.format(python=platform.python_version(), system=f"{platform.system()} {platform.machine()}"),
          end="")
    for name in sorted(versions):
        print(f"{name}=={versions[name]}")


if __name__ == "__main__":
    main()
