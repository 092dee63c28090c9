"""Check this environment and say what to fix: ``python -m common.tools.doctor`` (``make doctor``).

It first gathers facts (versions, devices, CPUs, start method, ``/dev/shm``, the data,
which interpreter runs) into a ``Facts`` record, then runs small check functions on it,
each returning a ``Check`` (ok / info / warn / problem, with the fix). Tests fake a
condition by changing one field of ``Facts``. From a notebook: ``print(report(diagnose()))``
checks the kernel itself, and ``print(summary())`` says the three things a first page needs
(versions, device, data). Exit status 1 when a problem was found.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import re
import shutil
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import torch
from packaging.version import InvalidVersion, Version

from common.cli import parse_dataclass_args
from common.paths import default_data_root, display_path, find_repo_root
from common.synthetic import SyntheticConfig, verify

#: Below this, DataLoader workers die with "bus error" / "No space left on device".
SHM_MINIMUM = 512 * 2**20
#: Below this, several workers with big batches can still run out.
SHM_COMFORTABLE = 2 * 2**30
_REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^\s;#,]*)")


@dataclass(frozen=True)
class Check:
    """The result of one check: ``status`` is "ok", "info", "warn" or "problem".

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """

    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Facts:
    """Everything the checks look at; ``gather_facts()`` fills it from the running process.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """

    python_version: tuple[int, int, int]
    executable: str
    prefix: str
    conda_prefix: str | None  # $CONDA_PREFIX: an activated conda env (environment.yml)
    repo: Path
    in_kernel: bool
    common_file: str
    packages: dict[str, str | None]  # distribution name -> installed version (None: missing)
    minimums: dict[str, str]  # distribution name -> lowest version the requirements allow
    torch_build: str  # "CUDA 12.4", "ROCm 6.1" or "CPU only"
    cuda_available: bool
    cuda_devices: tuple[str, ...]
    mps_available: bool
    cpu_count: int
    usable_cpus: int
    start_method: str
    shm_total: int | None  # bytes; None where there is no /dev/shm (macOS, Windows)
    shm_free: int | None
    data_root: Path
    data_problems: list[str] = field(default_factory=list)


def read_minimums(*paths: Path) -> dict[str, str]:
    """``name>=version`` lines of requirements files as {name: version} (``-r`` lines skipped).

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    minimums = {}
    for path in paths:
        if path.is_file():
            for line in path.read_text().splitlines():
                match = _REQUIREMENT.match(line.strip())
                if match:
                    minimums[match.group(1)] = match.group(2)
    return minimums


def installed_versions(names: list[str]) -> dict[str, str | None]:
    """Installed version of each distribution, ``None`` for those not installed.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def shm_size(path: Path = Path("/dev/shm")) -> tuple[int | None, int | None]:
    """Total and free bytes of the shared-memory filesystem, ``(None, None)`` if absent.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    if not path.is_dir():
        return None, None
    usage = shutil.disk_usage(path)
    return usage.total, usage.free


def gather_facts(data_root: Path | None = None, config: SyntheticConfig | None = None) -> Facts:
    """Collect the facts of the running interpreter (a kernel, if called from a notebook).

    Args:
        data_root: The dataset to verify; default ``default_data_root() / "shapes"``.
        config: The config it should match; default ``SyntheticConfig()``.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    repo = find_repo_root() or Path.cwd()  # an installed copy: the checks then say so
    minimums = read_minimums(*(path for path in (repo / "requirements.txt",
                                                 repo / "requirements-dev.txt") if path.is_file()))
    names = sorted(set(minimums) | {"torch", "torchvision", "numpy", "Pillow"})
    cuda = torch.cuda.is_available()
    root = Path(data_root) if data_root is not None else default_data_root() / "shapes"
    total, free = shm_size()
    return Facts(
        python_version=tuple(sys.version_info[:3]), executable=sys.executable,
        prefix=sys.prefix, conda_prefix=os.environ.get("CONDA_PREFIX"), repo=repo,
        in_kernel="ipykernel" in sys.modules,
        common_file=str(Path(__file__).resolve().parent / "__init__.py"),
        packages=installed_versions(names), minimums=minimums, torch_build=_torch_build(),
        cuda_available=cuda,
        cuda_devices=tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        if cuda else (),
        mps_available=torch.backends.mps.is_available(), cpu_count=os.cpu_count() or 1,
        usable_cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else (os.cpu_count() or 1),
        start_method=multiprocessing.get_start_method(allow_none=False),
        shm_total=total, shm_free=free, data_root=root,
        data_problems=verify(root, config or SyntheticConfig()))


def _torch_build() -> str:
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    if getattr(torch.version, "hip", None):
        return f"ROCm {torch.version.hip}"
    return "CPU only"


def check_python(facts: Facts) -> Check:
    """Python 3.10 or newer. Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`)."""
    version = ".".join(map(str, facts.python_version))
    if facts.python_version[:2] < (3, 10):
        return Check("python", "problem", f"Python {version} is too old",
                     "install Python 3.10+ and run `make distclean install PYTHON=python3.X`")
    return Check("python", "ok", f"Python {version} ({display_path(facts.executable)})")


def check_packages(facts: Facts) -> Check:
    """Every required distribution installed, at least at its minimum version.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    bad = []
    for name, version in sorted(facts.packages.items(), key=lambda kv: kv[0].lower()):
        minimum = facts.minimums.get(name)
        if version is None:
            bad.append(f"{name} is not installed")
        elif minimum and _older(version, minimum):
            bad.append(f"{name} {version} is older than {minimum}")
    first = ("torch", "torchvision")
    order = [n for n in first if n in facts.packages]
    order += sorted((n for n in facts.packages if n not in first), key=str.lower)
    listing = ", ".join(f"{n} {facts.packages[n]}" for n in order if facts.packages[n])
    if bad:
        return Check("packages", "problem", "; ".join(bad) + f" (found: {listing})",
                     "run `make install` (or `.venv/bin/python -m pip install -r "
                     "requirements-dev.txt -e .`)")
    return Check("packages", "ok", listing)


def _older(version: str, minimum: str) -> bool:
    try:
        return Version(version) < Version(minimum)
    except InvalidVersion:
        return False


def check_interpreter(facts: Facts) -> Check:
    """The running interpreter (or notebook kernel) is the repository's ``.venv``.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    what = "the notebook kernel" if facts.in_kernel else "this interpreter"
    venv = (facts.repo / ".venv").resolve()
    conda = facts.conda_prefix
    if Path(facts.prefix).resolve() == venv:
        return Check("interpreter", "ok", f"{what} is the repository's .venv ({display_path(facts.executable)})")
    if conda and Path(facts.prefix).resolve() == Path(conda).resolve():
        return Check("interpreter", "info", f"{what} runs in the conda env {conda}")
    fix = ("in JupyterLab pick the kernel of the .venv (start it with `make lab`, or register it "
           "once: `.venv/bin/python -m ipykernel install --user --name torch-pipelines`)"
           if facts.in_kernel else "run `make doctor`, or `.venv/bin/python -m common.tools.doctor`")
    return Check("interpreter", "problem",
                 # the whole path: it is what the user must find and replace
                 f"{what} is {facts.executable}, not {display_path(venv)}/bin/python", fix)


def check_common(facts: Facts) -> Check:
    """``common`` is imported from a checkout of this repository (an editable install).

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    if (facts.repo / "pyproject.toml").is_file() and (facts.repo / "chapters").is_dir():
        return Check("common package", "ok", f"imported from {display_path(facts.common_file)}")
    return Check("common package", "problem", f"`common` is imported from {facts.common_file}, "
                 "a copy outside the repository: edits to common/ will not take effect",
                 "run `make install` in the repository (installs `common` with `pip install -e .`)")


def check_devices(facts: Facts) -> Check:
    """Which accelerators PyTorch sees. Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`)."""
    if facts.cuda_available:
        return Check("devices", "ok", f"CUDA: {', '.join(facts.cuda_devices)} "
                     f"(torch built for {facts.torch_build})")
    if facts.mps_available:
        return Check("devices", "ok", "Apple MPS available")
    hint = (" — torch has CUDA support, so no GPU or driver is visible (check `nvidia-smi`)"
            if facts.torch_build != "CPU only" else "")
    return Check("devices", "info", f"no CUDA or MPS device (torch built for {facts.torch_build})"
                 f"{hint}: chapters run on the CPU, the DDP chapters with gloo")


def check_cpus(facts: Facts) -> Check:
    """CPU count and the multiprocessing start method. Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`)."""
    note = ("" if facts.start_method == "fork" else "; workers re-import what they run, so "
            "datasets, transforms and collate functions must live in a module, not a notebook")
    return Check("cpus", "info", f"{facts.usable_cpus} usable of {facts.cpu_count} CPUs; "
                 f"start method {facts.start_method!r}{note}")


def check_shm(facts: Facts) -> Check:
    """``/dev/shm`` is big enough for DataLoader workers to hand batches over.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    if facts.shm_total is None:
        return Check("/dev/shm", "info", "no /dev/shm on this system (not needed here)")
    size = f"{facts.shm_total / 2**20:.0f} MiB ({(facts.shm_free or 0) / 2**20:.0f} MiB free)"
    fix = ("in Docker start the container with `--shm-size=2g` (or `--ipc=host`); in "
           "Kubernetes mount an `emptyDir: {medium: Memory}` at /dev/shm; meanwhile use "
           "`num_workers=0`")
    if facts.shm_total < SHM_MINIMUM:
        return Check("/dev/shm", "problem", f"/dev/shm is only {size}: DataLoader workers will "
                     "crash (bus error / 'unable to write to file </torch_...>')", fix)
    if facts.shm_total < SHM_COMFORTABLE:
        return Check("/dev/shm", "warn", f"/dev/shm is {size}: enough for the chapters, tight "
                     "for many workers with big batches", fix)
    return Check("/dev/shm", "ok", size)


def suggest_num_workers(facts: Facts) -> int:
    """A starting point for ``num_workers``: one per usable CPU but one, at most 8, 0 if shm fails.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    if facts.shm_total is not None and facts.shm_total < SHM_MINIMUM:
        return 0
    return max(0, min(8, facts.usable_cpus - 1))


def check_workers(facts: Facts) -> Check:
    """The suggested ``num_workers``. Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`)."""
    return Check("num_workers", "info", f"start with num_workers={suggest_num_workers(facts)}, "
                 "then measure (the efficiency chapter shows how)")


def check_data(facts: Facts) -> Check:
    """The synthetic dataset is present and matches its manifest.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    if not facts.data_problems:
        return Check("data", "ok", f"synthetic data intact at {display_path(facts.data_root)}")
    missing = not (facts.data_root / "manifest.json").is_file()
    detail = (f"no synthetic data at {facts.data_root}" if missing else
              f"synthetic data at {facts.data_root} is damaged: {facts.data_problems[0]}"
              + (f" (+{len(facts.data_problems) - 1} more)" if len(facts.data_problems) > 1
                 else ""))
    return Check("data", "problem", detail,
                 "run `make data` (regenerates it; notebooks also do it via ensure_data())")


CHECKS = (check_python, check_interpreter, check_common, check_packages, check_devices,
          check_cpus, check_shm, check_workers, check_data)


def diagnose(facts: Facts | None = None) -> list[Check]:
    """Run every check on ``facts`` (default: this process's).

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    facts = facts if facts is not None else gather_facts()
    return [check(facts) for check in CHECKS]


def verdict(checks: list[Check]) -> str:
    """The one-line verdict. Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`)."""
    problems = [c.name for c in checks if c.status == "problem"]
    warnings = [c.name for c in checks if c.status == "warn"]
    if problems:
        return (f"VERDICT: NOT READY — {len(problems)} problem(s): {', '.join(problems)}. "
                "Apply the fixes above.")
    if warnings:
        return f"VERDICT: READY, with {len(warnings)} warning(s): {', '.join(warnings)}."
    return "VERDICT: READY — every chapter should run here."


def report(checks: list[Check]) -> str:
    """The full text report: one line per check, its fix below it, then the verdict.

    Introduced in chapters/01_pytorch_basics.ipynb (and `make doctor`).
    """
    marks = {"ok": "[ ok ]", "info": "[info]", "warn": "[warn]", "problem": "[FAIL]"}
    # not platform.platform(): on Linux it runs `uname -p`, a process the unit tier refuses
    where = f"{platform.system()} {platform.release()} {platform.machine()}"
    lines = [f"Environment doctor — {where}"]
    for check in checks:
        lines.append(f"{marks[check.status]} {check.name}: {check.detail}")
        if check.fix and check.status in ("warn", "problem"):
            lines.append(f"       fix: {check.fix}")
    return "\n".join([*lines, verdict(checks)])


def summary(facts: Facts | None = None) -> str:
    """The short form for a notebook's first page: versions, the device, the data (three lines).

    A line more names any other check that found a problem or a warning, and the command
    that prints the full report with the fixes (``python -m common.tools.doctor``).

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    facts = facts if facts is not None else gather_facts()
    checks = diagnose(facts)
    versions = [f"{name} {facts.packages.get(name) or 'NOT INSTALLED'}"
                for name in ("torch", "torchvision")]
    lines = [" · ".join([f"Python {'.'.join(map(str, facts.python_version))}", *versions]),
             f"device: {_device_line(facts)}", _data_line(checks)]
    others = [c.name for c in checks if c.status in ("problem", "warn") and c.name != "data"]
    if others:
        lines.append(f"also {len(others)} to look at ({', '.join(others)}): run "
                     "`python -m common.tools.doctor` for the full report and the fixes")
    return "\n".join(lines)


def _device_line(facts: Facts) -> str:
    if facts.cuda_available:
        return f"CUDA ({', '.join(facts.cuda_devices)})"
    if facts.mps_available:
        return "Apple MPS"
    return f"CPU (no CUDA or MPS device; torch built for {facts.torch_build})"


def _data_line(checks: list[Check]) -> str:
    data = next(c for c in checks if c.name == "data")
    if data.status == "ok":
        return f"data: ready ({data.detail})"
    return f"data: NOT READY — {data.detail}; fix: {data.fix}"


@dataclass
class DoctorConfig:
    """``python -m common.tools.doctor`` takes no options; ``--help`` says what it checks."""


def main(argv: list[str] | None = None) -> int:
    """Check this environment and print the report; exit status 1 if a check found a problem.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    parse_dataclass_args(DoctorConfig, argv, description=__doc__.splitlines()[0])
    checks = diagnose()
    print(report(checks))
    return 1 if any(c.status == "problem" for c in checks) else 0


if __name__ == "__main__":
    raise SystemExit(main())
