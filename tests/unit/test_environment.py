"""environment.yml (conda), requirements*.txt (pip) and pyproject.toml list the same packages."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
#: conda-forge names that differ from the pip names.
CONDA_TO_PIP = {"pytorch": "torch"}
_REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\-]+)\s*(.*)$")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _parse(line: str) -> tuple[str, str]:
    match = _REQUIREMENT.match(line.split("#")[0].strip())
    assert match, f"cannot parse requirement {line!r}"
    return _normalise(match.group(1)), match.group(2).replace(" ", "")


def _pip_requirements(path: Path) -> dict[str, str]:
    found = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#")[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            found.update(_pip_requirements(path.parent / line[3:].strip()))
            continue
        name, spec = _parse(line)
        found[name] = spec
    return found


def _conda_requirements() -> dict[str, str]:
    environment = yaml.safe_load((REPO / "environment.yml").read_text())
    found = {}
    for entry in environment["dependencies"]:
        entries = entry["pip"] if isinstance(entry, dict) else [entry]
        for item in entries:
            if item.startswith("-e") or item.split(">")[0].split("=")[0] in ("python", "pip"):
                continue
            name, spec = _parse(item)
            found[CONDA_TO_PIP.get(name, name)] = spec
    return found


def test_conda_and_pip_list_the_same_packages_and_ranges():
    pip = _pip_requirements(REPO / "requirements-dev.txt")
    conda = _conda_requirements()
    assert sorted(pip) == sorted(conda), (
        f"only in pip: {sorted(set(pip) - set(conda))}; only in conda: {sorted(set(conda) - set(pip))}")
    assert pip == conda


def test_package_metadata_matches_the_runtime_requirements():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = dict(_parse(d) for d in project["dependencies"])
    runtime = _pip_requirements(REPO / "requirements.txt")
    assert all(runtime.get(name) == spec for name, spec in declared.items()), declared


def test_requirements_dev_is_the_runtime_plus_every_extra():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"instructor", "shards", "dev"} <= set(extras)
    own = _normalise(project["name"])
    declared = dict(_parse(d) for d in project["dependencies"])
    for requirements in extras.values():
        declared.update(_parse(r) for r in requirements if not _normalise(r).startswith(own))
    dev = _pip_requirements(REPO / "requirements-dev.txt")
    runtime = _pip_requirements(REPO / "requirements.txt")
    # requirements.txt also has the Lab itself (jupyterlab, ipykernel, ipywidgets), which the
    # package never imports; everything else must be declared in pyproject with the same range.
    assert {n: s for n, s in dev.items() if n not in runtime or n in declared} == declared, (
        f"only in requirements-dev.txt: {sorted(set(dev) - set(declared) - set(runtime))}; "
        f"only in pyproject.toml: {sorted(set(declared) - set(dev))}")
    assert "torch-pipelines-companion[instructor,shards]" in extras["dev"]


def test_every_requirement_is_a_range_not_a_pin():
    for name, spec in _pip_requirements(REPO / "requirements-dev.txt").items():
        assert spec.startswith(">="), f"{name}{spec}: use a range (>=), not a pin"


def test_environment_yml_comments_each_dependency():
    text = (REPO / "environment.yml").read_text()
    section = text.split("dependencies:", 1)[1]
    lines = [line for line in section.splitlines()
             if re.match(r"^\s+- [a-z]", line) and not re.match(r"^\s+- (python|pip)\b", line)]
    uncommented = [line.strip() for line in lines if "#" not in line]
    assert len(lines) >= 10
    assert not uncommented, f"environment.yml entries without a comment: {uncommented}"
